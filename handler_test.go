package sluice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/golang-jwt/jwt/v5"
)

// Handler-level tests: a real Handler, built from a Caddyfile, adapted to
// JSON and loaded through a Caddy context (Provision and Validate), serving
// requests prepared as Caddy's server prepares them. Counters live in the
// package-global memory stores, and zone names are global, so every test
// names its zones uniquely (uniqueZone).

// loadConfigOnce loads a minimal config, so that caddy.ActiveContext carries
// a Config and ctx.App("events") works.
var loadConfigOnce sync.Once

var zoneSeq atomic.Int64

// uniqueZone is a zone name no other test (or run of a test) uses.
func uniqueZone(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, zoneSeq.Add(1))
}

// testContext is a child of the running config's context, canceled (and its
// modules cleaned up) when t ends.
func testContext(t testing.TB) caddy.Context {
	t.Helper()
	loadConfigOnce.Do(func() {
		if err := caddy.Load([]byte(`{"admin":{"disabled":true,"config":{"persist":false}}}`), true); err != nil {
			t.Fatalf("loading a minimal caddy config: %v", err)
		}
	})
	active := caddy.ActiveContext()
	if active.Context == nil {
		t.Fatal("no active caddy config")
	}
	ctx, cancel := caddy.NewContext(active)
	t.Cleanup(cancel)
	return ctx
}

// newHandler parses input as a rate_limit directive, adapts it to JSON and
// loads the module, as Caddy does with an adapted Caddyfile.
func newHandler(t testing.TB, input string) *Handler {
	t.Helper()
	parsed := new(Handler)
	if err := parsed.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input)); err != nil {
		t.Fatalf("parsing Caddyfile: %v\n%s", err, input)
	}
	raw, err := json.Marshal(parsed)
	if err != nil {
		t.Fatalf("encoding handler: %v", err)
	}
	mod, err := testContext(t).LoadModuleByID("http.handlers.rate_limit", raw)
	if err != nil {
		t.Fatalf("loading handler: %v\n%s", err, raw)
	}
	return mod.(*Handler)
}

// result is what one ServeHTTP did.
type result struct {
	rec  *httptest.ResponseRecorder
	err  error
	next int // calls of the next handler
	repl *caddy.Replacer
}

// header is the response header field name.
func (r result) header(name string) string { return r.rec.Header().Get(name) }

// status is the HandlerError's status, or 0 when err is no HandlerError.
func (r result) status() int {
	var he caddyhttp.HandlerError
	if errors.As(r.err, &he) {
		return he.StatusCode
	}
	return 0
}

// allowed reports whether the request reached next without error.
func (r result) allowed() bool { return r.err == nil && r.next == 1 }

// reqOpts shape a test request.
type reqOpts struct {
	remote  string            // RemoteAddr, host:port; default 192.0.2.1:1234
	headers map[string]string // request headers
}

// serve runs h on a GET request prepared as Caddy's server prepares it: a
// replacer in the context, the vars map, and {http.vars.client_ip} set to
// the remote host (what the server sets without trusted proxies).
func serve(t *testing.T, h *Handler, o reqOpts) result {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "http://example.com/api", nil)
	if o.remote != "" {
		req.RemoteAddr = o.remote
	} else {
		req.RemoteAddr = "192.0.2.1:1234"
	}
	for k, v := range o.headers {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	repl := caddy.NewReplacer()
	req = caddyhttp.PrepareRequest(req, repl, rec, nil)
	if host, _, err := net.SplitHostPort(req.RemoteAddr); err == nil {
		caddyhttp.SetVar(req.Context(), caddyhttp.ClientIPVarKey, host)
	}
	res := result{rec: rec, repl: repl}
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) error {
		res.next++
		w.WriteHeader(http.StatusOK)
		return nil
	})
	res.err = h.ServeHTTP(rec, req, next)
	return res
}

// rateLimitMember is one list member of a RateLimit header.
type rateLimitMember struct {
	name string
	r, t int64
}

var rateLimitMemberRE = regexp.MustCompile(`^"([^"]+)";r=(-?\d+);t=(-?\d+)$`)

// parseRateLimit parses a RateLimit header field value, in order.
func parseRateLimit(t *testing.T, value string) []rateLimitMember {
	t.Helper()
	if value == "" {
		t.Fatal("RateLimit header missing")
	}
	var members []rateLimitMember
	for _, part := range strings.Split(value, ",") {
		m := rateLimitMemberRE.FindStringSubmatch(strings.TrimSpace(part))
		if m == nil {
			t.Fatalf("RateLimit member %q: want \"name\";r=<n>;t=<n>", part)
		}
		r, _ := strconv.ParseInt(m[2], 10, 64)
		tt, _ := strconv.ParseInt(m[3], 10, 64)
		members = append(members, rateLimitMember{name: m[1], r: r, t: tt})
	}
	return members
}

// remaining is the r of zone in the RateLimit header, failing if absent.
func remaining(t *testing.T, res result, zone string) int64 {
	t.Helper()
	for _, m := range parseRateLimit(t, res.header("RateLimit")) {
		if m.name == zone {
			return m.r
		}
	}
	t.Fatalf("RateLimit %q: zone %s missing", res.header("RateLimit"), zone)
	return 0
}

// retryAfter is the Retry-After header as integer seconds, failing if it is
// absent or not an integer.
func retryAfter(t *testing.T, res result) int64 {
	t.Helper()
	v := res.header("Retry-After")
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("Retry-After = %q: want integer seconds", v)
	}
	return n
}

// wantDenied checks that res is a rejection with status and Retry-After ≥ 1
// that did not reach next.
func wantDenied(t *testing.T, res result, status int) {
	t.Helper()
	if res.next != 0 {
		t.Errorf("next called %d times on a denied request, want 0", res.next)
	}
	if got := res.status(); got != status {
		t.Errorf("error = %v (status %d), want HandlerError with status %d", res.err, got, status)
	}
	if got := retryAfter(t, res); got < 1 {
		t.Errorf("Retry-After = %d, want ≥ 1", got)
	}
}

func TestServeHTTPIPPrefix(t *testing.T) {
	type step struct {
		remote  string
		allowed bool
	}
	grouped := []step{
		{"203.0.113.5:1000", true},
		{"203.0.113.77:1000", false}, // same /24
		{"203.0.114.5:1000", true},   // another /24
		{"[2001:db8::1]:1000", true},
		{"[2001:db8::ffff]:1000", false}, // same /64
		{"[2001:db8:1::1]:1000", true},   // another /64
	}
	whole := []step{
		{"203.0.113.5:1000", true},
		{"203.0.113.77:1000", true}, // no prefix: each address alone
		{"203.0.113.5:2000", false}, // same address, other port
		{"[2001:db8::1]:1000", true},
		{"[2001:db8::ffff]:1000", true},
	}
	tests := []struct {
		name     string
		key      string
		prefixes string
		steps    []step
	}{
		{"remote host grouped", "{http.request.remote.host}", "ipv4_prefix 24\n ipv6_prefix 64", grouped},
		{"client_ip grouped", "{http.vars.client_ip}", "ipv4_prefix 24\n ipv6_prefix 64", grouped},
		{"client_ip in a longer key", "ip:{http.vars.client_ip}:x", "ipv4_prefix 24\n ipv6_prefix 64", grouped},
		{"remote host whole", "{http.request.remote.host}", "", whole},
		{"client_ip whole", "{http.vars.client_ip}", "", whole},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			zone := uniqueZone("ip")
			h := newHandler(t, fmt.Sprintf(`rate_limit {
				zone %s {
					key %s
					algorithm sliding_log
					events 1
					window 1h
					%s
				}
			}`, zone, tt.key, tt.prefixes))
			for i, s := range tt.steps {
				res := serve(t, h, reqOpts{remote: s.remote})
				if got := res.allowed(); got != s.allowed {
					t.Errorf("step %d (%s): allowed = %v (err %v), want %v", i, s.remote, got, res.err, s.allowed)
				}
			}
		})
	}
}

func TestServeHTTPStaticCost(t *testing.T) {
	zone := uniqueZone("cost")
	h := newHandler(t, fmt.Sprintf(`rate_limit {
		zone %s {
			key {http.request.remote.host}
			algorithm sliding_log
			events 5
			window 1h
			cost 3
		}
	}`, zone))
	first := serve(t, h, reqOpts{})
	if !first.allowed() {
		t.Fatalf("first request: err %v, next %d; want allowed", first.err, first.next)
	}
	if got := remaining(t, first, zone); got != 2 {
		t.Errorf("first request: r = %d, want 2", got)
	}
	second := serve(t, h, reqOpts{})
	wantDenied(t, second, http.StatusTooManyRequests)
	if got := remaining(t, second, zone); got != 2 {
		t.Errorf("denied request: r = %d, want 2 (a denial consumes nothing)", got)
	}
}

func TestServeHTTPPlaceholderCost(t *testing.T) {
	tests := []struct {
		name      string
		cost      *string // X-Cost header; nil: absent
		allowed   bool
		remaining int64 // r after the request, events 5
	}{
		{"two", ptr("2"), true, 3},
		{"not a number", ptr("abc"), true, 4},
		{"negative", ptr("-4"), true, 4},
		{"zero", ptr("0"), true, 4},
		{"empty", ptr(""), true, 4},
		{"absent", nil, true, 4},
		{"above the limit", ptr("999999"), false, 5},
		{"exactly the limit", ptr("5"), true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			zone := uniqueZone("pcost")
			h := newHandler(t, fmt.Sprintf(`rate_limit {
				zone %s {
					key {http.request.remote.host}
					algorithm sliding_log
					events 5
					window 1h
					cost {http.request.header.X-Cost}
				}
			}`, zone))
			o := reqOpts{headers: map[string]string{}}
			if tt.cost != nil {
				o.headers["X-Cost"] = *tt.cost
			}
			res := serve(t, h, o)
			if got := res.allowed(); got != tt.allowed {
				t.Errorf("allowed = %v (err %v), want %v", got, res.err, tt.allowed)
			}
			if !tt.allowed {
				wantDenied(t, res, http.StatusTooManyRequests)
			}
			if got := remaining(t, res, zone); got != tt.remaining {
				t.Errorf("r = %d, want %d", got, tt.remaining)
			}
			// What the request took shows on the next request of cost 1.
			after := serve(t, h, reqOpts{})
			if got, want := remaining(t, after, zone), tt.remaining-1; after.allowed() && got != want {
				t.Errorf("next request of cost 1: r = %d, want %d", got, want)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func TestServeHTTPHandlerDryRun(t *testing.T) {
	zone := uniqueZone("dry")
	h := newHandler(t, fmt.Sprintf(`rate_limit {
		dry_run
		zone %s {
			key {http.request.remote.host}
			algorithm sliding_log
			events 1
			window 1h
		}
	}`, zone))
	for i := range 3 {
		res := serve(t, h, reqOpts{})
		if !res.allowed() {
			t.Errorf("request %d: err %v, next %d; want next called without error (dry_run)", i, res.err, res.next)
		}
		if res.rec.Code != http.StatusOK {
			t.Errorf("request %d: status %d, want 200", i, res.rec.Code)
		}
		if got := remaining(t, res, zone); got != 0 {
			t.Errorf("request %d: r = %d, want 0", i, got)
		}
		if got := res.header("RateLimit-Remaining"); got != "0" {
			t.Errorf("request %d: RateLimit-Remaining = %q, want 0", i, got)
		}
	}
}

func TestServeHTTPZoneDryRun(t *testing.T) {
	dry, enforced := uniqueZone("zdry"), uniqueZone("zenf")
	h := newHandler(t, fmt.Sprintf(`rate_limit {
		zone %s {
			key {http.request.remote.host}
			algorithm sliding_log
			events 1
			window 1h
			dry_run
		}
		zone %s {
			key {http.request.remote.host}
			algorithm sliding_log
			events 3
			window 1h
		}
	}`, dry, enforced))
	for i := range 3 {
		res := serve(t, h, reqOpts{})
		if !res.allowed() {
			t.Fatalf("request %d: err %v, next %d; want allowed (the dry-run zone never denies)", i, res.err, res.next)
		}
		if got, want := remaining(t, res, enforced), int64(2-i); got != want {
			t.Errorf("request %d: %s r = %d, want %d", i, enforced, got, want)
		}
		if got := remaining(t, res, dry); got != 0 {
			t.Errorf("request %d: %s r = %d, want 0", i, dry, got)
		}
	}
	res := serve(t, h, reqOpts{})
	wantDenied(t, res, http.StatusTooManyRequests)
	if got := res.repl.ReplaceAll("{http.rate_limit.exceeded.name}", ""); got != enforced {
		t.Errorf("{http.rate_limit.exceeded.name} = %q, want %q (the enforced zone)", got, enforced)
	}
}

// eventRecorder records rate_limit_exceeded events.
type eventRecorder struct {
	mu     sync.Mutex
	events []map[string]any
}

func (e *eventRecorder) Handle(_ context.Context, ev caddy.Event) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, ev.Data)
	return nil
}

// forZone is the data of the events recorded for zone.
func (e *eventRecorder) forZone(zone string) []map[string]any {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []map[string]any
	for _, d := range e.events {
		if d["zone"] == zone {
			out = append(out, d)
		}
	}
	return out
}

func TestServeHTTPRejection(t *testing.T) {
	tests := []struct {
		name   string
		status string // status line; "" for the default
		want   int
	}{
		{"default status", "", http.StatusTooManyRequests},
		{"configured status", "status 503", http.StatusServiceUnavailable},
		{"configured 4xx", "status 420", 420},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			zone := uniqueZone("rej")
			h := newHandler(t, fmt.Sprintf(`rate_limit {
				%s
				zone %s {
					key {http.request.remote.host}
					algorithm sliding_log
					events 2
					window 1m
				}
			}`, tt.status, zone))
			rec := new(eventRecorder)
			if err := h.events.On("rate_limit_exceeded", rec); err != nil {
				t.Fatalf("subscribing to rate_limit_exceeded: %v", err)
			}
			for i := range 2 {
				if res := serve(t, h, reqOpts{}); !res.allowed() {
					t.Fatalf("request %d: err %v; want allowed", i, res.err)
				}
			}
			res := serve(t, h, reqOpts{})
			wantDenied(t, res, tt.want)
			// Retry-After ≤ window + window/events = 90s.
			if got := retryAfter(t, res); got > 90 {
				t.Errorf("Retry-After = %d, want ≤ 90", got)
			}
			if got := res.repl.ReplaceAll("{http.rate_limit.exceeded.name}", ""); got != zone {
				t.Errorf("{http.rate_limit.exceeded.name} = %q, want %q", got, zone)
			}
			if res.rec.Body.Len() != 0 || res.rec.Code != http.StatusOK {
				t.Errorf("handler wrote a response (%d, %q); want it left to error handling", res.rec.Code, res.rec.Body.String())
			}
			events := rec.forZone(zone)
			if len(events) != 1 {
				t.Fatalf("rate_limit_exceeded events for %s: %d, want 1", zone, len(events))
			}
			if _, ok := events[0]["key"]; ok {
				t.Errorf("event carries the key without log_key: %v", events[0])
			}
			if ra, ok := events[0]["retry_after"].(float64); !ok || ra < 1 {
				t.Errorf("event retry_after = %v, want seconds ≥ 1", events[0]["retry_after"])
			}
		})
	}
}

func TestServeHTTPJitter(t *testing.T) {
	tests := []struct {
		name     string
		jitter   string
		min, max int64
		varies   bool
	}{
		{"jitter 0.5", "jitter 0.5", 10, 15, true},
		{"no jitter", "", 10, 10, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			zone := uniqueZone("jit")
			h := newHandler(t, fmt.Sprintf(`rate_limit {
				%s
				zone %s {
					key {http.request.remote.host}
					algorithm sliding_log
					events 1
					window 10s
				}
			}`, tt.jitter, zone))
			if res := serve(t, h, reqOpts{}); !res.allowed() {
				t.Fatalf("first request: err %v; want allowed", res.err)
			}
			seen := make(map[int64]int)
			for range 60 {
				res := serve(t, h, reqOpts{})
				wantDenied(t, res, http.StatusTooManyRequests)
				got := retryAfter(t, res)
				if got < tt.min || got > tt.max {
					t.Errorf("Retry-After = %d, want within [%d, %d]", got, tt.min, tt.max)
				}
				seen[got]++
			}
			if varies := len(seen) > 1; varies != tt.varies {
				t.Errorf("Retry-After values %v: varies = %v, want %v", seen, varies, tt.varies)
			}
		})
	}
}

func TestServeHTTPAllOrNothing(t *testing.T) {
	wide, narrow := uniqueZone("aon-a"), uniqueZone("aon-b")
	h := newHandler(t, fmt.Sprintf(`rate_limit {
		zone %s {
			key {http.request.remote.host}
			algorithm sliding_log
			events 10
			window 1h
		}
		zone %s {
			key {http.request.remote.host}
			algorithm sliding_log
			events 1
			window 1h
		}
	}`, wide, narrow))
	first := serve(t, h, reqOpts{})
	if !first.allowed() {
		t.Fatalf("first request: err %v; want allowed", first.err)
	}
	if got := remaining(t, first, wide); got != 9 {
		t.Errorf("first request: %s r = %d, want 9", wide, got)
	}
	for i := range 3 {
		res := serve(t, h, reqOpts{})
		wantDenied(t, res, http.StatusTooManyRequests)
		if got := remaining(t, res, wide); got != 9 {
			t.Errorf("denied request %d: %s r = %d, want 9 (a request denied by %s consumes nothing)", i, wide, got, narrow)
		}
		if got := remaining(t, res, narrow); got != 0 {
			t.Errorf("denied request %d: %s r = %d, want 0", i, narrow, got)
		}
		if got := res.repl.ReplaceAll("{http.rate_limit.exceeded.name}", ""); got != narrow {
			t.Errorf("denied request %d: exceeded.name = %q, want %q", i, got, narrow)
		}
	}
	// Another client, in the wide zone only: still its own full quota.
	other := serve(t, h, reqOpts{remote: "192.0.2.99:1"})
	if got := remaining(t, other, wide); !other.allowed() || got != 9 {
		t.Errorf("other client: allowed %v, %s r = %d; want allowed, 9", other.allowed(), wide, got)
	}
}

var (
	ietfFields   = []string{"RateLimit-Policy", "RateLimit"}
	legacyFields = []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}
	xFields      = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}
)

func TestServeHTTPHeaderStyles(t *testing.T) {
	tests := []struct {
		name    string
		headers string // the headers line; "" for the default
		present []string
		absent  []string
	}{
		{"default", "", append(append([]string{}, ietfFields...), legacyFields...), xFields},
		{"x", "headers x", xFields, append(append([]string{}, ietfFields...), legacyFields...)},
		{"ietf", "headers ietf", ietfFields, append(append([]string{}, legacyFields...), xFields...)},
		{"legacy", "headers legacy", legacyFields, append(append([]string{}, ietfFields...), xFields...)},
		{"ietf and x", "headers ietf x", append(append([]string{}, ietfFields...), xFields...), legacyFields},
		{"none", "headers none", nil, append(append(append([]string{}, ietfFields...), legacyFields...), xFields...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			zone := uniqueZone("hdr")
			h := newHandler(t, fmt.Sprintf(`rate_limit {
				%s
				zone %s {
					key {http.request.remote.host}
					algorithm sliding_log
					events 2
					window 1m
				}
			}`, tt.headers, zone))
			check := func(res result, which string) {
				t.Helper()
				for _, f := range tt.present {
					if res.header(f) == "" {
						t.Errorf("%s response: %s missing", which, f)
					}
				}
				for _, f := range tt.absent {
					if v := res.header(f); v != "" {
						t.Errorf("%s response: %s = %q, want absent", which, f, v)
					}
				}
			}
			first := serve(t, h, reqOpts{})
			if !first.allowed() {
				t.Fatalf("first request: err %v; want allowed", first.err)
			}
			check(first, "allowed")
			if v := first.header("Retry-After"); v != "" {
				t.Errorf("allowed response: Retry-After = %q, want absent", v)
			}
			serve(t, h, reqOpts{})
			denied := serve(t, h, reqOpts{})
			wantDenied(t, denied, http.StatusTooManyRequests)
			check(denied, "denied")
		})
	}
}

func TestServeHTTPHeaderValues(t *testing.T) {
	zone := uniqueZone("hval")
	h := newHandler(t, fmt.Sprintf(`rate_limit {
		headers ietf legacy x
		zone %s {
			key {http.request.remote.host}
			algorithm sliding_log
			events 5
			window 1m
		}
	}`, zone))
	before := time.Now()
	res := serve(t, h, reqOpts{})
	if !res.allowed() {
		t.Fatalf("err %v; want allowed", res.err)
	}
	if got, want := res.header("RateLimit-Policy"), fmt.Sprintf(`"%s";q=5;w=60`, zone); got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	m := parseRateLimit(t, res.header("RateLimit"))
	if len(m) != 1 || m[0].name != zone || m[0].r != 4 || m[0].t < 1 || m[0].t > 60 {
		t.Errorf("RateLimit = %q, want \"%s\";r=4;t=<1..60>", res.header("RateLimit"), zone)
	}
	for field, want := range map[string]string{
		"RateLimit-Limit": "5", "RateLimit-Remaining": "4",
		"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "4",
	} {
		if got := res.header(field); got != want {
			t.Errorf("%s = %q, want %q", field, got, want)
		}
	}
	if reset, err := strconv.ParseInt(res.header("RateLimit-Reset"), 10, 64); err != nil || reset < 1 || reset > 60 {
		t.Errorf("RateLimit-Reset = %q, want seconds in [1, 60]", res.header("RateLimit-Reset"))
	}
	reset, err := strconv.ParseInt(res.header("X-RateLimit-Reset"), 10, 64)
	if err != nil || reset < before.Unix() || reset > time.Now().Add(61*time.Second).Unix() {
		t.Errorf("X-RateLimit-Reset = %q, want a Unix time within the next minute", res.header("X-RateLimit-Reset"))
	}
}

func TestServeHTTPHeaderZoneOrder(t *testing.T) {
	n := zoneSeq.Add(1)
	za, zb, zc := fmt.Sprintf("za-%d", n), fmt.Sprintf("zb-%d", n), fmt.Sprintf("zc-%d", n)
	zoneLines := func(name string, events int) string {
		return fmt.Sprintf("zone %s {\n key {http.request.remote.host}\n algorithm sliding_log\n events %d\n window 1m\n}\n", name, events)
	}
	// Declared out of order; zb has the least remaining.
	h := newHandler(t, "rate_limit {\n"+zoneLines(zc, 10)+zoneLines(za, 20)+zoneLines(zb, 3)+"}")
	res := serve(t, h, reqOpts{})
	if !res.allowed() {
		t.Fatalf("err %v; want allowed", res.err)
	}
	var names []string
	for _, m := range parseRateLimit(t, res.header("RateLimit")) {
		names = append(names, m.name)
	}
	if got, want := strings.Join(names, ","), strings.Join([]string{za, zb, zc}, ","); got != want {
		t.Errorf("RateLimit zones in order %s, want %s", got, want)
	}
	wantPolicy := fmt.Sprintf(`"%s";q=20;w=60, "%s";q=3;w=60, "%s";q=10;w=60`, za, zb, zc)
	if got := res.header("RateLimit-Policy"); got != wantPolicy {
		t.Errorf("RateLimit-Policy = %q, want %q", got, wantPolicy)
	}
	// legacy: the zone with the least remaining.
	if got, want := res.header("RateLimit-Limit")+"/"+res.header("RateLimit-Remaining"), "3/2"; got != want {
		t.Errorf("RateLimit-Limit/Remaining = %s, want %s (zone %s)", got, want, zb)
	}
}

// closedPort is a local address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestServeHTTPFailureMode(t *testing.T) {
	type step struct {
		allowed bool
		status  int // when denied
	}
	tests := []struct {
		mode  string
		steps []step
	}{
		{"open", []step{{true, 0}, {true, 0}, {true, 0}, {true, 0}}},
		{"closed", []step{{false, http.StatusServiceUnavailable}, {false, http.StatusServiceUnavailable}}},
		{"local", []step{{true, 0}, {true, 0}, {false, http.StatusTooManyRequests}, {false, http.StatusTooManyRequests}}},
	}
	addr := closedPort(t)
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			zone := uniqueZone("fail-" + tt.mode)
			h := newHandler(t, fmt.Sprintf(`rate_limit {
				redis {
					url redis://%s
					timeout 50ms
				}
				failure_mode %s
				zone %s {
					key {http.request.remote.host}
					algorithm sliding_log
					events 2
					window 1h
				}
			}`, addr, tt.mode, zone))
			for i, s := range tt.steps {
				res := serve(t, h, reqOpts{})
				if got := res.allowed(); got != s.allowed {
					t.Errorf("request %d: allowed = %v (err %v), want %v", i, got, res.err, s.allowed)
					continue
				}
				if !s.allowed {
					if got := res.status(); got != s.status {
						t.Errorf("request %d: error %v (status %d), want status %d", i, res.err, got, s.status)
					}
					if res.next != 0 {
						t.Errorf("request %d: next called on a denied request", i)
					}
				}
				if tt.mode == "local" {
					if got, want := remaining(t, res, zone), max(0, int64(1-i)); got != want {
						t.Errorf("request %d: r = %d, want %d (local counters)", i, got, want)
					}
				}
			}
		})
	}
}

// TestServeHTTPCircuitBreaker checks that a Redis that never answers does
// not cost the timeout on every request: with a breaker open, most requests
// never reach Redis. The server below accepts connections and reads, but
// never replies.
func TestServeHTTPCircuitBreaker(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	var conns atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						c.Close()
						return
					}
				}
			}()
		}
	}()
	zone := uniqueZone("breaker")
	h := newHandler(t, fmt.Sprintf(`rate_limit {
		redis {
			url redis://%s
			timeout 20ms
		}
		zone %s {
			key {http.request.remote.host}
			events 5
			window 1m
		}
	}`, l.Addr(), zone))
	const requests = 30
	for i := range requests {
		if res := serve(t, h, reqOpts{}); !res.allowed() {
			t.Fatalf("request %d: err %v; want allowed (failure_mode open)", i, res.err)
		}
	}
	if got := conns.Load(); got > requests/2 {
		t.Errorf("Redis connections over %d requests to a hung Redis: %d; want a circuit breaker to spare most of them", requests, got)
	}
}

func TestServeHTTPJWT(t *testing.T) {
	const secret = "k-handler-test-secret"
	token := func(t *testing.T, key, sub string) string {
		t.Helper()
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": sub,
			"exp": time.Now().Add(time.Hour).Unix(),
		}).SignedString([]byte(key))
		if err != nil {
			t.Fatalf("signing: %v", err)
		}
		return s
	}
	zone := uniqueZone("jwt")
	h := newHandler(t, fmt.Sprintf(`rate_limit {
		jwt {
			secret %s
		}
		zone %s {
			key {jwt.sub}
			algorithm sliding_log
			events 1
			window 1h
		}
	}`, secret, zone))
	tests := []struct {
		name    string
		token   string // "" for no Authorization header
		allowed bool
		sub     string // want {http.rate_limit.jwt.sub}
	}{
		{"alice", token(t, secret, "alice"), true, "alice"},
		{"bob, own bucket", token(t, secret, "bob"), true, "bob"},
		{"alice again", token(t, secret, "alice"), false, "alice"},
		{"forged carol", token(t, "wrong", "carol"), true, ""},
		{"forged dave shares the empty bucket", token(t, "wrong", "dave"), false, ""},
		{"no token shares the empty bucket", "", false, ""},
		{"bob again", token(t, secret, "bob"), false, "bob"},
	}
	for _, tt := range tests {
		o := reqOpts{remote: "192.0.2.7:1", headers: map[string]string{}}
		if tt.token != "" {
			o.headers["Authorization"] = "Bearer " + tt.token
		}
		res := serve(t, h, o)
		if got := res.allowed(); got != tt.allowed {
			t.Errorf("%s: allowed = %v (err %v), want %v", tt.name, got, res.err, tt.allowed)
		}
		if got := res.repl.ReplaceAll("{http.rate_limit.jwt.sub}", ""); got != tt.sub {
			t.Errorf("%s: {http.rate_limit.jwt.sub} = %q, want %q", tt.name, got, tt.sub)
		}
	}
}

// Interface guard for the test's event handler.
var _ caddyevents.Handler = (*eventRecorder)(nil)
