package sluice

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/textproto"
	"path"
	"reflect"
	"runtime"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

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

	// exceededPlaceholder names the zone that denied; exceededEvent is the
	// event a rejection emits, bannedEvent the one a zone's trip emits.
	exceededPlaceholder = "http.rate_limit.exceeded.name"
	exceededEvent       = "rate_limit_exceeded"
	bannedEvent         = "rate_limit_banned"
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

// writeProblem answers the rejection itself with the problem JSON body and
// status; the rate-limit headers and Retry-After are already set. A write
// error (the client left) is not one of the handler's, as for Caddy's
// respond. The values share one fresh slice (never a package-level one,
// which a later handler could edit in place).
func writeProblem(w http.ResponseWriter, status int, body string) error {
	h, values := w.Header(), []string{problemContentType, "nosniff", strconv.Itoa(len(body))}
	h[headerContentType] = values[0:1:1]
	h[headerNoSniff] = values[1:2:2]
	h[headerContentLength] = values[2:3:3]
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
	return nil
}
