package sluice

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestUndecidedLeaseReleased: a decision whose answer is lost (here the
// timeout passes while Redis is busy in DEBUG SLEEP) may
// still run in Redis and take a lease; the handler gives it back, so the
// key's slot does not stay taken for the zone's window.
func TestUndecidedLeaseReleased(t *testing.T) {
	srv := redistest.Start(t, "--enable-debug-command", "yes")
	rdb := srv.Client(t)
	ctx := context.Background()
	zone := uniqueZone("undecided")
	h := newHandler(t, fmt.Sprintf("rate_limit {\n\tredis {\n\t\turl redis://%s\n\t\ttimeout 50ms\n\t}\n\tzone %s {\n\t\tkey k\n\t\talgorithm concurrency\n\t\tevents 1\n\t}\n}", srv.Addr, zone))
	if res := serveNext(t, h, respondWith(http.StatusOK)); res.next != 1 { // connects, loads the library
		t.Fatalf("first request: got %d calls of next, want 1 (err %v)", res.next, res.err)
	}
	calls := func() int64 { // Functions, or EVALSHA on Redis 6
		info := redistest.ReadInfo(t, rdb, "commandstats")
		return info.Stat("cmdstat_fcall", "calls") + info.Stat("cmdstat_evalsha", "calls") + info.Stat("cmdstat_eval", "calls")
	}
	before := calls()
	go func() { _ = srv.Client(t).Do(ctx, "DEBUG", "SLEEP", "0.4").Err() }()
	busy := time.Now().Add(5 * time.Second)
	probe := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer probe.Close()
	for { // until Redis sleeps: a PING no longer answers in time
		pingCtx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		err := probe.Ping(pingCtx).Err()
		cancel()
		if err != nil {
			break
		}
		if time.Now().After(busy) {
			t.Fatal("Redis never went to sleep")
		}
	}
	if res := serveNext(t, h, respondWith(http.StatusOK)); res.next != 1 { // failure_mode open
		t.Fatalf("request while Redis sleeps: got %d calls of next, want 1 (err %v)", res.next, res.err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for calls() < before+1 { // the lost decision ran once Redis woke
		if time.Now().After(deadline) {
			t.Fatal("the paused decision never ran")
		}
		time.Sleep(10 * time.Millisecond)
	}
	settling.Wait()
	key := h.zones[0].storeKey("k")
	// leases are scored by their expiry; a release that reached Redis
	// before its lease leaves a tombstone, scored below 0, never counted
	if n, err := rdb.ZCount(ctx, key, "0", "+inf").Result(); err != nil || n != 0 {
		t.Errorf("leases of %s after the lost decision: got %d (%v), want 0", key, n, err)
	}
}
