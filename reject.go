package sluice

import (
	"errors"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// denial is the zone of v that denies for longest and the Retry-After
// sent for it (jitter included, whole seconds).
func (h *Handler) denial(v *verdict) (int, time.Duration) {
	denied := -1
	var retry time.Duration
	for i, d := range v.ds {
		if v.denies(i) && d.RetryAfter >= retry {
			denied, retry = i, d.RetryAfter
		}
	}
	return denied, jitteredRetry(retry, h.Jitter)
}

// reject answers a request that v denies, with the headers and the
// Retry-After of the zone that denies for longest, through Caddy's error
// handling, so that handle_errors can shape the response, or, with
// problem_details, itself.
// A flood is all rejections, so this does only what is observed: the
// event's data is built when something listens for it, and the problem
// JSON when problem_details or the placeholder asks for it.
func (h *Handler) reject(w http.ResponseWriter, r *http.Request, v *verdict) error {
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	denied, retry := h.denial(v)
	z, seconds := v.zones[denied], ceilSeconds(retry)
	// With problem_details, and no handle_errors to shape it, the rejection
	// is answered here with the problem JSON; {http.rate_limit.problem}
	// holds it, else what builds it when read.
	answer := h.ProblemDetails && !hasErrorRoutes(r)
	var body string
	var problem any
	if answer {
		body = problemBody(h.Status, v, retry)
		problem = body
	} else {
		problem = newLazyProblem(h.Status, v, retry)
	}
	h.headers.writeAll(w.Header(), v, h.headers.now(), seconds)
	repl.Set(exceededPlaceholder, z.nameValue)
	if h.events.ShouldEmit(exceededEvent) {
		data := map[string]any{"zone": z.name, "retry_after": retry.Seconds()}
		if h.LogKey {
			data["key"] = z.expand(repl)
		}
		h.events.Emit(h.ctx, exceededEvent, data)
	}
	outcome := h.emitBans(repl, v)
	repl.Set(problemPlaceholder, problem)
	traceDecision(r.Context(), v, outcome, seconds)
	if answer {
		return writeProblem(w, h.Status, body)
	}
	return rejectionError(h.Status, z.exceeded)
}

// emitBans emits rate_limit_banned for each zone of v whose ban this
// request started (once per ban: later and cached denials of the ban do
// not start it), and returns v's trace outcome: banned when a zone's ban
// denies it, else denied.
func (h *Handler) emitBans(repl *caddy.Replacer, v *verdict) outcome {
	o := outcomeDenied
	for i, d := range v.ds {
		if !d.Banned {
			continue
		}
		o = outcomeBanned
		if d.BanStarted && h.events.ShouldEmit(bannedEvent) {
			z := v.zones[i]
			data := map[string]any{"zone": z.name, "ban_seconds": time.Duration(z.Ban).Seconds()}
			if h.LogKey {
				data["key"] = z.expand(repl)
			}
			h.events.Emit(h.ctx, bannedEvent, data)
		}
	}
	return o
}

// refuse answers a request the backend did not decide: a client that left
// gets 499 in the access log, as reverse_proxy records it; one that
// failure_mode closed refused goes through the site's handle_errors when
// it has some (Caddy logs those at debug level), else gets the bare status
// here, so that Caddy does not log every refused request as an error: the
// outage is logged, throttled, by failureLog.
func refuse(w http.ResponseWriter, r *http.Request, err error) error {
	if errors.Is(err, errClientLeft) {
		w.WriteHeader(statusClientClosed)
		return nil
	}
	var he caddyhttp.HandlerError
	if hasErrorRoutes(r) || !errors.As(err, &he) {
		return err
	}
	w.WriteHeader(he.StatusCode)
	return nil
}

// hasErrorRoutes reports whether r's site has handle_errors routes: they
// shape rejections then, problem_details or not, and find the problem JSON
// in {http.rate_limit.problem}. A server's error routes are its sites'
// handle_errors, each behind the site's host matcher (what the Caddyfile
// makes), so the routes whose matchers take r are its site's; a matcher
// that cannot tell yet (one on the error) counts as taking it.
func hasErrorRoutes(r *http.Request) bool {
	srv, ok := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok || srv == nil || srv.Errors == nil {
		return false
	}
	for _, route := range srv.Errors.Routes {
		if matched, err := route.MatcherSets.AnyMatchWithError(r); matched || err != nil {
			return true
		}
	}
	return false
}
