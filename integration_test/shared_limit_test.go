package integration_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestThreeInstancesShareOneLimit runs three Caddy processes against one
// Redis and floods them together: for the exact algorithms exactly `events`
// requests pass, however the requests spread over the instances.
func TestThreeInstancesShareOneLimit(t *testing.T) {
	srv := redistest.Start(t)

	const (
		events   = 50
		requests = 300
		replicas = 3
	)
	tests := []struct {
		algorithm string
		// window is long where time passing during the burst could change
		// the count: fixed_window windows are aligned to the epoch, so a
		// 1h window makes a boundary inside the burst very unlikely (and
		// alignedWait below avoids the last seconds before one); a token
		// bucket refills events/window, one token per 72 s at 1h instead of
		// one per 1.2 s at 1m. sliding_log is exact for any burst shorter
		// than its window, and so is sliding_window (its first slot leaves
		// a window and a slot, 63 s, after the burst began).
		window string
	}{
		{"fixed_window", "1h"},
		{"sliding_window", "1m"},
		{"sliding_log", "1m"},
		{"token_bucket", "1h"},
	}
	for _, tt := range tests {
		t.Run(tt.algorithm, func(t *testing.T) {
			// Each algorithm gets its own key, so no state carries over.
			// failure_mode closed and a long timeout: a slow decision under
			// this load shows as a 503, never as a hidden admission
			site := fmt.Sprintf(`	rate_limit {
%s		failure_mode closed
		zone shared {
			key static-key-%s
			algorithm %s
			events %d
			window %s
		}
	}
	respond "ok" 200`, redisBlock(srv, "timeout 5s"), tt.algorithm, tt.algorithm, events, tt.window)

			urls := make([]string, replicas)
			for i := range urls {
				urls[i] = startCaddy(t, caddyConfig{Site: site}).URL
			}
			if tt.algorithm == "fixed_window" {
				avoidHourBoundary(t)
			}

			res := startTraffic(newClient(requests), trafficPlan{
				workers: requests,
				target:  onePerWorker(urls, func(int) string { return "" }),
			}).wait()
			if res.errs > 0 {
				t.Errorf("%d requests failed; the first: %v", res.errs, res.firstErr)
			}
			counts := res.byStatus
			if got, want := counts[http.StatusOK], events; got != want {
				t.Errorf("%d concurrent requests over %d instances: got %d allowed, want %d (all statuses: %v)",
					requests, replicas, got, want, counts)
			}
			if got, want := counts[http.StatusTooManyRequests], requests-events; got != want {
				t.Errorf("%d concurrent requests over %d instances: got %d rejected with 429, want %d (all statuses: %v)",
					requests, replicas, got, want, counts)
			}
		})
	}
}

// avoidHourBoundary waits out the last seconds of a clock hour, so that a
// burst against a 1h fixed window (aligned to the epoch, on the Redis
// clock, which is this machine's) does not straddle two windows.
func avoidHourBoundary(t *testing.T) {
	t.Helper()
	const margin = 20 * time.Second
	now := time.Now()
	if next := now.Truncate(time.Hour).Add(time.Hour); next.Sub(now) < margin {
		t.Logf("waiting %v for the hour boundary to pass", next.Sub(now)+time.Second)
		time.Sleep(next.Sub(now) + time.Second)
	}
}
