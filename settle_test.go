package sluice

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// serveNext runs h on a GET request prepared as serve prepares it, with
// next as the next handler, and waits until the request's settlements are
// applied.
func serveNext(t *testing.T, h *Handler, next caddyhttp.HandlerFunc) result {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "http://example.com/api", nil)
	req.RemoteAddr = "192.0.2.1:1234"
	rec := httptest.NewRecorder()
	repl := caddy.NewReplacer()
	req = caddyhttp.PrepareRequest(req, repl, rec, nil)
	res := result{rec: rec, repl: repl}
	counted := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		res.next++
		return next(w, r)
	})
	res.err = h.ServeHTTP(rec, req, counted)
	settling.Wait()
	return res
}

// respondWith is a next handler answering status, with headers (name,
// value pairs).
func respondWith(status int, headers ...string) caddyhttp.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) error {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.WriteHeader(status)
		_, err := w.Write([]byte("body"))
		return err
	}
}

// failWith is a next handler that writes nothing and returns err.
func failWith(err error) caddyhttp.HandlerFunc {
	return func(http.ResponseWriter, *http.Request) error { return err }
}

// TestServeHTTPCountStatus: only responses with a listed status keep their
// reservation; errors count by their status, written or returned.
func TestServeHTTPCountStatus(t *testing.T) {
	tests := []struct {
		name    string
		next    caddyhttp.HandlerFunc
		counted bool
	}{
		{"401 counts", respondWith(http.StatusUnauthorized), true},
		{"403 counts", respondWith(http.StatusForbidden), true},
		{"200 is refunded", respondWith(http.StatusOK), false},
		{"nothing written is 200", func(http.ResponseWriter, *http.Request) error { return nil }, false},
		{"handler error 502 counts as 5xx", failWith(caddyhttp.Error(http.StatusBadGateway, errors.New("down"))), true},
		{"handler error 404 is refunded", failWith(caddyhttp.Error(http.StatusNotFound, errors.New("gone"))), false},
		{"plain error counts as 500", failWith(errors.New("boom")), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			zone := uniqueZone("status")
			h := newHandler(t, fmt.Sprintf("rate_limit {\n\tzone %s {\n\t\tkey k\n\t\talgorithm fixed_window\n\t\tevents 3\n\t\twindow 1h\n\t\tcount_status 401 403 5xx\n\t}\n}", zone))
			for i := range 3 {
				if res := serveNext(t, h, tt.next); res.next != 1 {
					t.Fatalf("request %d: got %d calls of next, want 1 (err %v)", i, res.next, res.err)
				}
			}
			res := serveNext(t, h, tt.next)
			if got, want := res.next == 1, !tt.counted; got != want {
				t.Errorf("fourth request: got admitted=%v, want %v (err %v)", got, want, res.err)
			}
		})
	}
}

// TestServeHTTPCostFromResponse: the real cost replaces the reservation;
// a bad value leaves it; a debt denies what follows for as long as it
// takes to drain.
func TestServeHTTPCostFromResponse(t *testing.T) {
	tests := []struct {
		name    string
		tokens  string
		nextR   int64 // r of the next request (reserving 10)
		allowed bool
	}{
		{"less than reserved", "3", 100 - 3 - 10, true},
		{"more than reserved", "30", 100 - 30 - 10, true},
		{"zero", "0", 100 - 10, true},
		{"not a number", "many", 100 - 10 - 10, true},
		{"negative", "-5", 100 - 10 - 10, true},
		{"a debt", "250", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			zone := uniqueZone("tokens")
			h := newHandler(t, fmt.Sprintf("rate_limit {\n\tzone %s {\n\t\tkey k\n\t\talgorithm token_bucket\n\t\tevents 100\n\t\twindow 1h\n\t\tcost 10\n\t\tcost_from_response {http.response.header.X-Usage-Tokens}\n\t}\n}", zone))
			first := serveNext(t, h, respondWith(http.StatusOK, "X-Usage-Tokens", tt.tokens))
			if got, want := remaining(t, first, zone), int64(90); got != want {
				t.Errorf("first response: got r=%d, want %d (the state before settling)", got, want)
			}
			res := serveNext(t, h, respondWith(http.StatusOK))
			if got := res.next == 1; got != tt.allowed {
				t.Fatalf("next request: got admitted=%v, want %v", got, tt.allowed)
			}
			if got := remaining(t, res, zone); got != tt.nextR {
				t.Errorf("next request: got r=%d, want %d", got, tt.nextR)
			}
			if !tt.allowed {
				// level capped at 2 × 100 tokens; 10 more need 110 to drain at 100/h
				if got, want := retryAfter(t, res), int64(3960); got != want {
					t.Errorf("Retry-After: got %d, want %d", got, want)
				}
				// a client that paces on t waits as long: not the next token's 36 s
				m := parseRateLimit(t, res.header("RateLimit"))
				if len(m) != 1 || m[0].r != 0 || m[0].t != 3960 || res.header("RateLimit-Reset") != "3960" {
					t.Errorf("RateLimit %q, RateLimit-Reset %q: want r=0;t=3960 and Reset 3960, as Retry-After", res.header("RateLimit"), res.header("RateLimit-Reset"))
				}
			}
		})
	}
}

// TestServeHTTPConcurrencyReleases: a slot is given back whatever ends
// the response, so the only slot is free again each time.
func TestServeHTTPConcurrencyReleases(t *testing.T) {
	tests := []struct {
		name string
		next caddyhttp.HandlerFunc
	}{
		{"normal end", respondWith(http.StatusOK)},
		{"upstream error", failWith(caddyhttp.Error(http.StatusBadGateway, errors.New("down")))},
		{"client gone", failWith(caddyhttp.Error(499, errors.New("context canceled")))},
		{"panic", func(http.ResponseWriter, *http.Request) error { panic("handler bug") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			zone := uniqueZone("inflight")
			h := newHandler(t, fmt.Sprintf("rate_limit {\n\tzone %s {\n\t\tkey k\n\t\talgorithm concurrency\n\t\tevents 1\n\t}\n}", zone))
			for i := range 3 {
				res := serveRecovering(t, h, tt.next)
				if res.next != 1 {
					t.Fatalf("request %d: got %d calls of next, want 1 (err %v): the slot was not given back", i, res.next, res.err)
				}
			}
		})
	}
}

// serveRecovering is serveNext that survives a panic of next.
func serveRecovering(t *testing.T, h *Handler, next caddyhttp.HandlerFunc) (res result) {
	t.Helper()
	calls := 0
	defer func() {
		if v := recover(); v != nil {
			settling.Wait()
			res = result{next: calls}
		}
	}()
	return serveNext(t, h, func(w http.ResponseWriter, r *http.Request) error {
		calls++
		return next(w, r)
	})
}

// TestServeHTTPConcurrencyInFlight: two requests held in next take both
// slots; a third is denied with a concurrency policy member; after they
// end it passes.
func TestServeHTTPConcurrencyInFlight(t *testing.T) {
	zone := uniqueZone("inflight")
	h := newHandler(t, fmt.Sprintf("rate_limit {\n\tzone %s {\n\t\tkey k\n\t\talgorithm concurrency\n\t\tevents 2\n\t}\n}", zone))
	entered, release := make(chan struct{}), make(chan struct{})
	hold := func(w http.ResponseWriter, _ *http.Request) error {
		entered <- struct{}{}
		<-release
		w.WriteHeader(http.StatusOK)
		return nil
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { serveNext(t, h, hold) })
		<-entered
	}
	res := serveNext(t, h, respondWith(http.StatusOK))
	wantDenied(t, res, http.StatusTooManyRequests)
	if got, want := res.header("RateLimit-Policy"), fmt.Sprintf(`"%s";q=2;qu="concurrent-requests"`, zone); got != want {
		t.Errorf("RateLimit-Policy: got %s, want %s", got, want)
	}
	if got, want := remaining(t, res, zone), int64(0); got != want {
		t.Errorf("r: got %d, want %d", got, want)
	}
	close(release)
	wg.Wait()
	res = serveNext(t, h, respondWith(http.StatusOK))
	if res.next != 1 {
		t.Fatalf("after release: got %d calls of next, want 1 (err %v)", res.next, res.err)
	}
	if got, want := remaining(t, res, zone), int64(1); got != want {
		t.Errorf("after release: got r=%d, want %d", got, want)
	}
}

// TestServeHTTPSettleFailureModes: with Redis down, failure_mode local
// settles in the local store that decided (the one slot comes back each
// time), and open admits without reserving, so there is nothing to settle.
func TestServeHTTPSettleFailureModes(t *testing.T) {
	addr := closedPort(t)
	for _, mode := range []string{"local", "open"} {
		t.Run(mode, func(t *testing.T) {
			zone := uniqueZone("inflight-" + mode)
			h := newHandler(t, fmt.Sprintf("rate_limit {\n\tredis {\n\t\turl redis://%s\n\t\ttimeout 50ms\n\t}\n\tfailure_mode %s\n\tzone %s {\n\t\tkey k\n\t\talgorithm concurrency\n\t\tevents 1\n\t}\n}", addr, mode, zone))
			for i := range 3 {
				if res := serveNext(t, h, respondWith(http.StatusOK)); res.next != 1 {
					t.Fatalf("request %d: got %d calls of next, want 1 (err %v)", i, res.next, res.err)
				}
			}
		})
	}
}

// TestSettleMetrics: refunds and debts are counted per zone, and the
// slots gauge (leases_held) goes up while a request is in flight and back
// down after.
func TestSettleMetrics(t *testing.T) {
	zone := uniqueZone("metrics")
	h := newHandler(t, fmt.Sprintf("rate_limit {\n\tzone %s {\n\t\tkey k\n\t\talgorithm fixed_window\n\t\tevents 100\n\t\twindow 1h\n\t\tcost 10\n\t\tcost_from_response {http.response.header.X-Usage-Tokens}\n\t}\n\tzone %s-c {\n\t\tkey k\n\t\talgorithm concurrency\n\t\tevents 5\n\t}\n}", zone, zone))
	m := h.zones[0].settled
	serveNext(t, h, respondWith(http.StatusOK, "X-Usage-Tokens", "3"))
	serveNext(t, h, respondWith(http.StatusOK, "X-Usage-Tokens", "30"))
	serveNext(t, h, respondWith(http.StatusOK, "X-Usage-Tokens", "10"))
	if got, want := testutilValue(t, m.refunds), 1.0; got != want {
		t.Errorf("refunds: got %v, want %v", got, want)
	}
	if got, want := testutilValue(t, m.debts), 1.0; got != want {
		t.Errorf("debts: got %v, want %v", got, want)
	}
	slots := h.zones[1].settled.slots
	var during float64
	serveNext(t, h, func(w http.ResponseWriter, _ *http.Request) error {
		during = testutilValue(t, slots)
		return nil
	})
	if during != 1 {
		t.Errorf("slots held during the request: got %v, want 1", during)
	}
	if got := testutilValue(t, slots); got != 0 {
		t.Errorf("slots held after the request: got %v, want 0", got)
	}
}

// TestServeHTTPClientLeaves: an admitted request whose client leaves
// before its response keeps its reservation, whatever the next handler
// makes of the disconnect (reverse_proxy's 499, or a plain error): the
// upstream may have done the work. With events 1, the next request is
// denied. cost_from_response charges the reservation when nothing was
// reported.
func TestServeHTTPClientLeaves(t *testing.T) {
	reverseProxy := func(cancel context.CancelFunc) caddyhttp.HandlerFunc {
		return func(http.ResponseWriter, *http.Request) error {
			cancel()
			return caddyhttp.Error(statusClientClosed, context.Canceled)
		}
	}
	plainError := func(cancel context.CancelFunc) caddyhttp.HandlerFunc {
		return func(_ http.ResponseWriter, r *http.Request) error {
			cancel()
			<-r.Context().Done()
			return r.Context().Err()
		}
	}
	tests := []struct {
		name  string
		zone  string // the zone's settling line
		leave func(context.CancelFunc) caddyhttp.HandlerFunc
	}{
		{"count_status 2xx, 499 from the proxy", "count_status 2xx", reverseProxy},
		{"count_status 2xx, a plain error", "count_status 2xx", plainError},
		{"count_status 401, 499 from the proxy", "count_status 401", reverseProxy},
		{"cost_from_response, nothing reported", "cost_from_response {http.response.header.X-Usage-Tokens}", reverseProxy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			zone := uniqueZone("leaves")
			h := newHandler(t, rateLimit(zoneCfg(zone, "key k", "algorithm sliding_log", "events 1", "window 1h", tt.zone)))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req := httptest.NewRequestWithContext(ctx, http.MethodGet, "http://example.com/api", nil)
			rec := httptest.NewRecorder()
			req = caddyhttp.PrepareRequest(req, caddy.NewReplacer(), rec, nil)
			if err := h.ServeHTTP(rec, req, tt.leave(cancel)); err == nil {
				t.Fatal("request whose client left: got no error from next, want it passed on")
			}
			settling.Wait()
			res := serveNext(t, h, respondWith(http.StatusOK))
			wantDenied(t, res, http.StatusTooManyRequests)
		})
	}
}
