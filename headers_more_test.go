package sluice

import (
	"fmt"
	"strconv"
	"testing"
)

// TestServeHTTPRetryAfterNotBeforeT: on a rejection, t (and RateLimit-Reset)
// is when more quota comes back, and Retry-After is never earlier, for
// every algorithm; t is not the time until the quota is whole.
func TestServeHTTPRetryAfterNotBeforeT(t *testing.T) {
	tests := []struct {
		algorithm string
		maxT      int64 // the latest t can be, in seconds
	}{
		{"fixed_window", 60},
		{"sliding_window", 63}, // a slot (1m/20 = 3 s) counts whole until it has left the window
		{"sliding_log", 60},
		{"token_bucket", 6}, // one token every 6 s, not 60 s for all 10
	}
	for _, tt := range tests {
		t.Run(tt.algorithm, func(t *testing.T) {
			zone := uniqueZone("tmore")
			h := newHandler(t, fmt.Sprintf(`rate_limit {
				headers ietf legacy
				zone %s {
					key {http.request.remote.host}
					algorithm %s
					events 10
					window 1m
				}
			}`, zone, tt.algorithm))
			for i := range 10 {
				if res := serve(t, h, reqOpts{}); !res.allowed() {
					t.Fatalf("request %d: denied (%v), want allowed", i, res.err)
				}
			}
			res := serve(t, h, reqOpts{})
			wantDenied(t, res, 429)
			m := parseRateLimit(t, res.header("RateLimit"))
			if len(m) != 1 {
				t.Fatalf("RateLimit %q: want one member", res.header("RateLimit"))
			}
			if m[0].t < 1 || m[0].t > tt.maxT {
				t.Errorf("t: got %d, want 1 to %d", m[0].t, tt.maxT)
			}
			if got := retryAfter(t, res); got < m[0].t {
				t.Errorf("Retry-After: got %d, want ≥ t = %d", got, m[0].t)
			}
			if got, want := res.header("RateLimit-Reset"), strconv.FormatInt(m[0].t, 10); got != want {
				t.Errorf("RateLimit-Reset: got %s, want t = %s", got, want)
			}
		})
	}
}
