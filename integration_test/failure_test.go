package integration_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// recoverTimeout bounds how long limiting may take to work again after
// Redis comes back (circuit breaker probe, reconnect, script reload).
const recoverTimeout = 30 * time.Second

// TestFailureMode stops Redis under a running Caddy: failure_mode open lets
// requests through, closed answers 503. When Redis is back (empty, so its
// script cache is empty too) limiting works again without restarting Caddy.
func TestFailureMode(t *testing.T) {
	srv := redistest.Start(t)
	const events = 3
	// The key comes from a header, so each attempt below can use a fresh
	// bucket: whatever earlier attempts counted does not matter. The
	// timeout is generous: a stopped Redis refuses the connection at once,
	// so failure_mode decides without waiting for it, and on a busy
	// machine a slow answer before the outage stays Redis's decision.
	site := ""
	for _, mode := range []string{"open", "closed"} {
		site += fmt.Sprintf(`	handle /%s {
		rate_limit {
%s			failure_mode %s
			zone fail%s {
				key {http.request.header.X-Attempt}
				algorithm sliding_log
				events %d
				window 1m
			}
		}
		respond "ok" 200
	}
`, mode, redisBlock(srv, "timeout 5s"), mode, mode, events)
	}
	caddy := startCaddy(t, caddyConfig{Site: site})
	client := newClient(1)

	tests := []struct {
		mode       string
		downStatus int // every request while Redis is down
	}{
		{"open", http.StatusOK},
		{"closed", http.StatusServiceUnavailable},
	}

	limited := wantStatuses(events, 1, http.StatusTooManyRequests)
	for _, tt := range tests {
		got := statuses(t, client, caddy.URL+"/"+tt.mode, events+1, "X-Attempt", "before")
		if !slices.Equal(got, limited) {
			t.Fatalf("failure_mode %s, Redis up: got statuses %v, want %v", tt.mode, got, limited)
		}
	}

	srv.Stop()
	for _, tt := range tests {
		t.Run(tt.mode+"/redis_down", func(t *testing.T) {
			// More requests than events on a fresh key: open must not
			// reject, closed must not admit.
			errorLines := strings.Count(caddy.Log.String(), `"level":"error"`)
			got := statuses(t, client, caddy.URL+"/"+tt.mode, events+2, "X-Attempt", "during")
			if want := wantStatuses(0, events+2, tt.downStatus); !slices.Equal(got, want) {
				t.Errorf("failure_mode %s, Redis down: got statuses %v, want %v", tt.mode, got, want)
			}
			// the outage is logged, throttled; not one error line per request
			if n := strings.Count(caddy.Log.String(), `"level":"error"`) - errorLines; n > 2 {
				t.Errorf("failure_mode %s, Redis down: %d error lines logged for %d requests, want at most 2", tt.mode, n, events+2)
			}
			// The key that reached its limit before the outage stays denied:
			// its denial is cached until quota returns, exact without Redis.
			got = statuses(t, client, caddy.URL+"/"+tt.mode, 2, "X-Attempt", "before")
			if want := wantStatuses(0, 2, http.StatusTooManyRequests); !slices.Equal(got, want) {
				t.Errorf("failure_mode %s, Redis down, key denied before: got statuses %v, want %v", tt.mode, got, want)
			}
		})
	}

	srv.Restart(t)
	for _, tt := range tests {
		t.Run(tt.mode+"/redis_back", func(t *testing.T) {
			// Each attempt takes a fresh key: it passes once events
			// requests are admitted and the next one is rejected.
			waitLimiting(t, client, limitProbe{
				what:   "failure_mode " + tt.mode + " after Redis restarted",
				url:    caddy.URL + "/" + tt.mode,
				header: "X-Attempt", prefix: "after-",
				want: limited, within: recoverTimeout,
			})
		})
	}
}
