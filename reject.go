package sluice

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/textproto"
	"path"
	"reflect"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// reject answers a request that v denies, its headers written (with the
// Retry-After of the zone that denies for longest, o: observe found them),
// through Caddy's error handling, so that handle_errors can shape the
// response, or, with problem_details, itself, with the problem JSON.
// A flood is all rejections, so this does only what is observed: the
// event's data is built when something listens for it, and the problem
// JSON when problem_details or the placeholder asks for it.
func (h *Handler) reject(w http.ResponseWriter, r *http.Request, v *verdict, o observed) error {
	cancelOuterSlots(w)
	body, rejected := h.announce(r, v, o.denied, o.retry)
	if rejected != nil { // inside this handler, so that a tracing span sees the status
		return h.answerRejection(w, r, rejected)
	}
	// Answered here: a write error (the client left) is not the handler's,
	// as for Caddy's respond. The values share one fresh slice (never a
	// package-level one, which a later handler could edit in place).
	hdr, values := w.Header(), []string{problemContentType, "nosniff", strconv.Itoa(len(body))}
	hdr[headerContentType], hdr[headerNoSniff], hdr[headerContentLength] = values[0:1:1], values[1:2:2], values[2:3:3]
	w.WriteHeader(h.Status)
	_, _ = w.Write([]byte(body))
	return nil
}

// announce tells of v's rejection, Retry-After retry for zone denied: the
// placeholders, and the events when something listens for them. It
// returns the problem JSON when the rejection is answered here (with
// problem_details, and no handle_errors to shape it, or from inside
// them), and, when Caddy's error handling answers it instead, the error
// that hands it over.
func (h *Handler) announce(r *http.Request, v *verdict, denied int, retry time.Duration) (string, error) {
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	z := v.zones[denied]
	var body string
	var problem any // {http.rate_limit.problem}: the JSON, or what builds it when read
	var rejected error
	if h.ProblemDetails && (inErrorRoutes(r) || !hasErrorRoutes(r)) {
		body = problemBody(h.Status, v, retry)
		problem = body
	} else {
		problem = newLazyProblem(h.Status, v, retry)
		rejected = rejectionError(h.Status, z.exceeded)
	}
	repl.Set(exceededPlaceholder, z.nameValue)
	repl.Set(problemPlaceholder, problem)
	return body, rejected
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

// Problem details (RFC 9457) of a rejection: the quota-exceeded problem
// type that draft-ietf-httpapi-ratelimit-headers registers, with its
// violated-policies member naming the RateLimit-Policy members (zones) that
// denied.
const (
	problemType        = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemTitle       = "Quota Exceeded"
	problemContentType = "application/problem+json"

	// problemPlaceholder holds the problem JSON of every rejection, with
	// or without problem_details, so that handle_errors can answer it
	// (`respond {http.rate_limit.problem}`) or build on it.
	problemPlaceholder = "http.rate_limit.problem"

	// exceededPlaceholder names the zone that denied.
	exceededPlaceholder = "http.rate_limit.exceeded.name"
)

// rejectTrace is the Trace of a rejection's HandlerError: where it comes
// from, in caddyhttp.Error's format, found once rather than by a stack
// walk (runtime.Caller) on every rejection, which costs a flood more than
// the decision.
var rejectTrace string

func init() {
	pc := reflect.ValueOf((*Handler).reject).Pointer()
	if fn := runtime.FuncForPC(pc); fn != nil {
		file, line := fn.FileLine(pc)
		rejectTrace = fmt.Sprintf("%s (%s:%d)", path.Base(fn.Name()), path.Base(file), line)
	}
}

// errorIDAlphabet and errorIDLen are those of caddyhttp.Error's IDs
// ({http.error.id}): 9 characters, one case, no look-alikes.
const (
	errorIDAlphabet = "abcdefghijkmnpqrstuvwxyz23456789"
	errorIDLen      = 9
)

// rejectionError is caddyhttp.Error(status, err) as reject returns it, with
// a fresh random ID and rejectTrace.
func rejectionError(status int, err error) caddyhttp.HandlerError {
	var id [errorIDLen]byte
	for i := range id {
		id[i] = errorIDAlphabet[rand.IntN(len(errorIDAlphabet))]
	}
	return caddyhttp.HandlerError{ID: string(id[:]), StatusCode: status, Err: err, Trace: rejectTrace}
}

// lazyProblem is the value of {http.rate_limit.problem} without
// problem_details: the problem JSON, built when the placeholder is read
// (caddy.ToString calls String), so a rejection nobody answers with it, a
// flood's, builds none. It holds the denying zones (all the body names)
// and builds the body at most once.
type lazyProblem struct {
	status int
	retry  time.Duration
	n      int
	denied [4]*Zone
	body   string
}

// newLazyProblem is the placeholder value of a rejection: a lazyProblem
// when at most 4 zones deny, the JSON itself when more do.
func newLazyProblem(status int, v *verdict, retry time.Duration) any {
	p := &lazyProblem{status: status, retry: retry}
	for i, z := range v.zones {
		if !v.denies(i) {
			continue
		}
		if p.n == len(p.denied) {
			return problemBody(status, v, retry)
		}
		p.denied[p.n] = z
		p.n++
	}
	return p
}

// String is the problem JSON.
func (p *lazyProblem) String() string {
	if p.body == "" {
		var reqs [4]algorithms.Request
		var ds [4]algorithms.Decision // all denying
		p.body = problemBody(p.status, &verdict{zones: p.denied[:p.n], reqs: reqs[:p.n], ds: ds[:p.n]}, p.retry)
	}
	return p.body
}

var (
	headerContentType   = textproto.CanonicalMIMEHeaderKey("Content-Type")
	headerContentLength = textproto.CanonicalMIMEHeaderKey("Content-Length")
	headerNoSniff       = textproto.CanonicalMIMEHeaderKey("X-Content-Type-Options")
)

// problemBody is the problem JSON of a rejection with status and
// Retry-After retry, for the zones of v that denied it (dry-run zones do
// not deny). Its detail names the zones and the retry time, never a key.
//
// It is encoded by hand, in one buffer: zone names are letters, digits,
// '_', '-' and '.' (Zone.validate), so no string needs escaping.
func problemBody(status int, v *verdict, retry time.Duration) string {
	var stack [512]byte
	b := append(stack[:0], `{"type":"`+problemType+`","title":"`+problemTitle+`","status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"detail":"`...)
	b = appendDetail(b, v, retry)
	b = append(b, `","violated-policies":[`...)
	n := 0
	for i, z := range v.zones {
		if v.denies(i) {
			if n > 0 {
				b = append(b, ',')
			}
			b = append(append(append(b, '"'), z.name...), '"')
			n++
		}
	}
	return string(append(b, "]}"...))
}

// appendDetail appends the human-readable detail, e.g. "Quota exceeded in
// zones api, burst; retry in 7 seconds."
func appendDetail(b []byte, v *verdict, retry time.Duration) []byte {
	count := 0
	for i := range v.zones {
		if v.denies(i) {
			count++
		}
	}
	b = append(b, "Quota exceeded in zone"...)
	if count > 1 {
		b = append(b, 's')
	}
	n := 0
	for i, z := range v.zones {
		if v.denies(i) {
			if n > 0 {
				b = append(b, ',')
			}
			b = append(append(b, ' '), z.name...)
			n++
		}
	}
	seconds := max(1, ceilSeconds(retry))
	b = strconv.AppendInt(append(b, "; retry in "...), seconds, 10)
	if seconds == 1 {
		return append(b, " second."...)
	}
	return append(b, " seconds."...)
}

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
// span sees the status; its Retry-After is the longest the breaker
// leaves Redis alone, 2 s (Redis is tried again by then).
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, err error) error {
	cancelOuterSlots(w)
	if errors.Is(err, errClientLeft) {
		w.WriteHeader(statusClientClosed)
		return nil
	}
	w.Header().Set(headerRetryAfter, strconv.FormatInt(ceilSeconds(algorithms.MaxBreakerCooldown), 10))
	return h.answerRejection(w, r, err)
}

// shedProblemType is the problem type of a shed request: not
// quota-exceeded, since the client used no quota: the upstream is busy.
const shedProblemType = "https://github.com/sluicehq/caddy-sluice/blob/main/docs/load-shedding.md#overloaded"

// shed answers a request adaptive zone sh.z shed (observe recorded it,
// writeHeaders wrote only this zone's RateLimit member: q its class's
// share, r what is left of it): the zone's status and Retry-After,
// through handle_errors as any rejection, or with problem_details the
// problem JSON (type overloaded, not quota-exceeded). A request whose
// client left while it waited gets only the status 499.
func (h *Handler) shed(w http.ResponseWriter, r *http.Request, sh shedding) error {
	cancelOuterSlots(w)
	if sh.left {
		w.WriteHeader(statusClientClosed)
		return nil
	}
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	body := shedProblem(sh.z, sh.share)
	repl.Set(exceededPlaceholder, sh.z.nameValue)
	repl.Set(problemPlaceholder, body)
	if !h.ProblemDetails || (hasErrorRoutes(r) && !inErrorRoutes(r)) {
		return h.answerRejection(w, r, rejectionError(sh.z.Status, sh.z.exceeded))
	}
	hdr := w.Header()
	hdr.Set(headerContentType, problemContentType)
	hdr.Set(headerNoSniff, "nosniff")
	hdr.Set(headerContentLength, strconv.Itoa(len(body)))
	w.WriteHeader(sh.z.Status)
	_, _ = w.Write([]byte(body))
	return nil
}

// shedProblem is the problem JSON of a request zone z shed.
func shedProblem(z *Zone, share int) string {
	return `{"type":"` + shedProblemType + `","title":"Overloaded","status":` + strconv.Itoa(z.Status) +
		`,"detail":"the upstream is at its limit of requests in flight: try again later","zone":` + z.quoted +
		`,"limit":` + strconv.Itoa(share) + `,"retry_after":1}`
}
