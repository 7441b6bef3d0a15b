package sluice

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestLocalFallbackFreshPerOutage: under failure_mode local, each outage
// starts from fresh local counters (the last outage's do not carry over),
// and the admin API's reset reaches the local counters too.
func TestLocalFallbackFreshPerOutage(t *testing.T) {
	srv := redistest.Start(t)
	zone := uniqueZone("local-fresh")
	h := newHandler(t, fmt.Sprintf(`rate_limit {
		redis {
			url %s
			timeout 200ms
		}
		failure_mode local
		zone %s {
			key {http.request.remote.host}
			algorithm sliding_log
			events 2
			window 1h
		}
	}`, srv.URL(), zone))
	allowed := func(t *testing.T, want ...bool) {
		t.Helper()
		for i, w := range want {
			if got := serve(t, h, reqOpts{}).allowed(); got != w {
				t.Errorf("request %d of the outage: allowed = %v, want %v", i, got, w)
			}
		}
	}

	srv.Stop()
	allowed(t, true, true, false) // the local limit holds during the outage
	reg, ok := lookupZone(zone)
	if !ok {
		t.Fatal("zone not registered")
	}
	_ = reg.reset(context.Background(), "192.0.2.1") // Redis is down: only the local reset can succeed
	allowed(t, true)

	srv.Restart(t)
	deadline := time.Now().Add(10 * time.Second)
	for h.backend.local.failing.Load() { // until Redis answers a request again
		if time.Now().After(deadline) {
			t.Fatal("Redis never answered after its restart")
		}
		serve(t, h, reqOpts{})
	}

	srv.Stop()
	allowed(t, true, true, false) // fresh counters at the second outage's start
}
