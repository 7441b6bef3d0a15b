package sluice

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// Tests of a zone's cost per request (static, from a placeholder, clamped
// to its cap) through the handler and requestCost.

func TestServeHTTPStaticCost(t *testing.T) {
	zone := uniqueZone("cost")
	h := newHandler(t, rateLimit(logZone(zone, 5, "1h", "cost 3")))
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
			h := newHandler(t, rateLimit(logZone(zone, 5, "1h", "cost {http.request.header.X-Cost}")))
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

// TestServeHTTPHugeCost: a cost from a header that would wrap int64 (or
// pass it) buys nothing and crashes nothing, on every algorithm and on
// both stores: it is denied for a window, and the key then admits exactly
// its events of cost 1 and denies the next.
func TestServeHTTPHugeCost(t *testing.T) {
	srv := redistest.Start(t)
	backends := map[string]string{
		"memory": "",
		"redis":  fmt.Sprintf("redis {\n url %s\n}", srv.URL()),
	}
	costs := []string{"9223372036854775807", "99999999999999999999999", "6"}
	for backend, block := range backends {
		for _, alg := range []string{"fixed_window", "sliding_window", "sliding_log", "token_bucket"} {
			for _, cost := range costs {
				t.Run(backend+"/"+alg+"/"+cost, func(t *testing.T) {
					zone := uniqueZone("huge")
					h := newHandler(t, fmt.Sprintf(`rate_limit {
						%s
						zone %s {
							key {http.request.remote.host}
							algorithm %s
							events 5
							window 1m
							cost {http.request.header.X-Cost}
						}
					}`, block, zone, alg))
					res := serve(t, h, reqOpts{headers: map[string]string{"X-Cost": cost}})
					wantDenied(t, res, http.StatusTooManyRequests)
					if got, want := retryAfter(t, res), int64(60); got != want {
						t.Errorf("Retry-After: got %d, want %d (one window)", got, want)
					}
					for i := range 5 {
						if res := serve(t, h, reqOpts{}); !res.allowed() {
							t.Fatalf("request %d of cost 1 after the huge one: got denied (%v), want allowed", i, res.err)
						}
					}
					if res := serve(t, h, reqOpts{}); res.allowed() {
						t.Error("request 6 of cost 1: got allowed, want denied (limit 5)")
					}
				})
			}
		}
	}
}

// TestRequestCostClamp: a numeric cost is clamped to capacity + 1, so that
// above the capacity stays above it; what is not a positive integer is 1.
func TestRequestCostClamp(t *testing.T) {
	tests := []struct {
		header string
		want   int64
	}{
		{"3", 3},
		{"5", 5},
		{"6", 6},
		{"1000", 6},
		{"9223372036854775807", 6},
		{"99999999999999999999999", 6},
		{"-99999999999999999999999", 1},
		{"0", 1},
		{"1e9", 1},
		{"", 1},
	}
	z := &Zone{Key: "k", MaxEvents: 5, Window: 60e9, Cost: "{http.request.header.X-Cost}"}
	if err := z.setup("clamp"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		repl := caddy.NewReplacer()
		repl.Set("http.request.header.X-Cost", tt.header)
		if got := z.requestCost(repl, z.limit.Capacity()); got != tt.want {
			t.Errorf("X-Cost %q: got cost %d, want %d", tt.header, got, tt.want)
		}
	}
}
