package integration_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestRecoveryLoggedOncePerRedis: three handlers share one Redis; it dies
// and comes back, and each handler's requests fail, then are decided by
// Redis again. The recovery is one log line, for the Redis, not one per
// handler.
func TestRecoveryLoggedOncePerRedis(t *testing.T) {
	srv := redistest.Start(t)
	redis := redisBlock(srv, "timeout 200ms")
	paths := []string{"/a", "/b", "/c"}
	site := ""
	for _, p := range paths {
		site += drillHandle(p+"*", "zone"+strings.TrimPrefix(p, "/"), "open", redis)
	}
	caddy := startCaddy(t, caddyConfig{Site: site})
	client := newClient(1)
	// decided by Redis: the answer carries the zone's RateLimit field
	decided := func(path string) bool {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, caddy.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Key", "k")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		_ = resp.Body.Close()
		return resp.Header.Get("RateLimit") != ""
	}
	for _, p := range paths {
		if !decided(p) {
			t.Fatalf("GET %s with Redis up: no RateLimit field, want one", p)
		}
	}
	srv.Kill()
	for _, p := range paths {
		if decided(p) {
			t.Fatalf("GET %s with Redis dead: a RateLimit field, want a failure_mode answer", p)
		}
	}
	srv.Restart(t)
	left := paths
	for deadline := time.Now().Add(30 * time.Second); len(left) > 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var still []string
		for _, p := range left {
			if !decided(p) {
				still = append(still, p)
			}
		}
		left = still
	}
	if len(left) > 0 {
		t.Fatalf("after Redis came back, %v never decided by Redis again", left)
	}
	if got, want := strings.Count(caddy.Log.String(), "rate limit store recovered"), 1; got != want {
		t.Errorf("recovery log lines: got %d, want %d (one per Redis)", got, want)
	}
}
