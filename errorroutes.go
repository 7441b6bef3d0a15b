package sluice

import (
	"errors"
	"net/http"
	"sync"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// A rejection is answered inside this handler, so that whatever wraps it
// sees the status it gets: Caddy's `tracing` handler (OpenTelemetry's
// otelhttp wrapper) records the status written inside its span, 200 when
// none was, and sets http.response.status_code from it once the handler
// returns; Caddy's own error handling runs after that span has ended. So
// the rejection's status is written inside the span, by the site's
// handle_errors routes when it has some (run here, as Caddy's server runs
// them: on the request as the client sent it, with {http.error.*} set),
// else by this handler; handle_errors still sets the headers and body,
// since nothing is written before it runs.

// errorChains caches, per server, its error routes compiled as Caddy's
// server compiles them: a flood of rejections compiles nothing.
type errorChains struct {
	chains sync.Map // *caddyhttp.Server → caddyhttp.Handler
}

// of is srv's compiled error routes (compiled anew without a cache: a
// handler not provisioned).
func (c *errorChains) of(srv *caddyhttp.Server) caddyhttp.Handler {
	if c == nil {
		return srv.Errors.Routes.Compile(writeErrorStatus)
	}
	if chain, ok := c.chains.Load(srv); ok {
		return chain.(caddyhttp.Handler)
	}
	chain, _ := c.chains.LoadOrStore(srv, srv.Errors.Routes.Compile(writeErrorStatus))
	return chain.(caddyhttp.Handler)
}

// writeErrorStatus ends the error routes as Caddy's server does when none
// of them answered: with the error's status.
var writeErrorStatus = caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
	status := http.StatusInternalServerError
	if he, ok := r.Context().Value(caddyhttp.ErrorCtxKey).(caddyhttp.HandlerError); ok {
		status = he.StatusCode
	}
	w.WriteHeader(status)
	return nil
})

// answerRejection answers the rejection rejected (a caddyhttp.HandlerError)
// inside this handler: through the site's error routes when it has some,
// else with its bare status, as Caddy would. A failing error route is
// logged, and the status written, as Caddy's server does. A handler inside
// the error routes (a rate_limit in handle_errors) answers with the bare
// status: running them again would reject again, without end, and an error
// returned from them makes Caddy log it at error level and answer the
// first error's status, not the rejection's.
func (h *Handler) answerRejection(w http.ResponseWriter, r *http.Request, rejected error) error {
	he, ok := asHandlerError(rejected)
	if !ok {
		return rejected
	}
	srv, _ := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if srv == nil || srv.Errors == nil || len(srv.Errors.Routes) == 0 || inErrorRoutes(r) {
		w.WriteHeader(he.StatusCode)
		return nil
	}
	er := srv.Errors.WithError(clientRequest(r), rejected)
	if err := h.errorChains.of(srv).ServeHTTP(w, er); err != nil {
		h.logger.Error("error handling handler error", zap.Error(err), zap.Int("status", he.StatusCode))
		w.WriteHeader(he.StatusCode)
	}
	return nil
}

// inErrorRoutes reports whether r is being served by error routes, Caddy's
// or answerRejection's: both put the error in r's context.
func inErrorRoutes(r *http.Request) bool {
	return r.Context().Value(caddyhttp.ErrorCtxKey) != nil
}

// asHandlerError is err's HandlerError: err itself, as rejectionError and
// caddyhttp.Error make it, without errors.As's allocation, or one it wraps.
func asHandlerError(err error) (caddyhttp.HandlerError, bool) {
	if he, ok := err.(caddyhttp.HandlerError); ok {
		return he, true
	}
	var he caddyhttp.HandlerError
	ok := errors.As(err, &he)
	return he, ok
}

// clientRequest is r with the method, remote address and URI the client
// sent, undoing rewrites, as Caddy's server restores them before its
// error routes (a copy: r itself is left as it is).
func clientRequest(r *http.Request) *http.Request {
	orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request)
	if !ok || orig.URL == nil {
		return r
	}
	cr := *r
	cr.Method, cr.RemoteAddr, cr.RequestURI = orig.Method, orig.RemoteAddr, orig.RequestURI
	u := *orig.URL
	if orig.URL.User != nil {
		user := *orig.URL.User
		u.User = &user
	}
	cr.URL = &u
	return &cr
}

// refuse answers a request the backend did not decide: a client that left
// gets 499 in the access log, as reverse_proxy records it; one that
// failure_mode closed refused is answered here, as a rejection is
// (answerRejection: the site's handle_errors when it has some, else the
// bare status), so that Caddy does not log every refused request as an
// error (the outage is logged, throttled, by failureLog) and a tracing
// span sees the status.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, err error) error {
	if errors.Is(err, errClientLeft) {
		w.WriteHeader(statusClientClosed)
		return nil
	}
	return h.answerRejection(w, r, err)
}
