package sluice

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

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
		if got := z.requestCost(repl); got != tt.want {
			t.Errorf("X-Cost %q: got cost %d, want %d", tt.header, got, tt.want)
		}
	}
}
