package sluice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// Handler-level tests: a real Handler, built from a Caddyfile, adapted to
// JSON and loaded through a Caddy context (Provision and Validate), serving
// requests prepared as Caddy's server prepares them. This file holds that
// harness and the tests of ServeHTTP itself (rejection, all or nothing,
// dry_run); the tests of each concern sit beside its file (headers_test.go,
// zone_test.go, keys_test.go, failure_test.go, jwt_test.go). Counters live in the
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
	return newHandlerIn(t, testContext(t), input)
}

// newHandlerIn is newHandler in ctx: canceling ctx cleans the handler up,
// as Caddy does when it stops or unloads a config.
func newHandlerIn(t testing.TB, ctx caddy.Context, input string) *Handler {
	t.Helper()
	parsed := new(Handler)
	if err := parsed.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input)); err != nil {
		t.Fatalf("parsing Caddyfile: %v\n%s", err, input)
	}
	raw, err := json.Marshal(parsed)
	if err != nil {
		t.Fatalf("encoding handler: %v", err)
	}
	mod, err := ctx.LoadModuleByID("http.handlers.rate_limit", raw)
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
	if r.err == nil && r.next == 0 { // the handler answered itself
		return r.rec.Code
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
	return serveStack(t, o, h)
}

// serveStack runs handlers in turn on such a request, each passing it on
// to the next, the last to a next handler that counts its calls and
// answers 200.
func serveStack(t *testing.T, o reqOpts, handlers ...caddyhttp.MiddlewareHandler) result {
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
	for i := len(handlers) - 1; i > 0; i-- {
		h, inner := handlers[i], next
		next = caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error { return h.ServeHTTP(w, r, inner) })
	}
	res.err = handlers[0].ServeHTTP(rec, req, next)
	return res
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

func TestServeHTTPAllOrNothing(t *testing.T) {
	wide, narrow := uniqueZone("aon-a"), uniqueZone("aon-b")
	h := newHandler(t, rateLimit(logZone(wide, 10, "1h"), logZone(narrow, 1, "1h")))
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

func TestServeHTTPHandlerDryRun(t *testing.T) {
	zone := uniqueZone("dry")
	h := newHandler(t, rateLimit("dry_run", logZone(zone, 1, "1h")))
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

// Interface guard for the test's event handler.
var _ caddyevents.Handler = (*eventRecorder)(nil)

// TestMatchKeysShareOneString: every zone's request gets the store key
// storeKey gives it, though match builds them in one buffer.
func TestMatchKeysShareOneString(t *testing.T) {
	h := newHandler(t, rateLimit(
		zoneCfg(uniqueZone("a"), "key {http.request.header.X-Key}", "events 10", "window 1m"),
		zoneCfg(uniqueZone("b"), "key {http.request.method}-{http.request.header.X-Key}", "algorithm token_bucket", "events 10", "window 1m"),
		zoneCfg(uniqueZone("c"), "key {http.request.header.X-Other}", "events 10", "window 1m"),
	))
	req, _ := benchRequest("tenant-7", "192.0.2.7")
	v, err := matchOf(h, req)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(v.reqs), 3; got != want {
		t.Fatalf("%d requests, want %d", got, want)
	}
	for i, z := range v.zones {
		if got, want := v.reqs[i].Key, z.storeKey(v.repl.ReplaceAll(z.Key, "")); got != want {
			t.Errorf("zone %s: key %q, want %q", z.name, got, want)
		}
	}
}

// matchOf is h's verdict of r before any decision, as ServeHTTP matches it.
func matchOf(h *Handler, r *http.Request) (verdict, error) {
	return h.match(r, newHeldSlots())
}
