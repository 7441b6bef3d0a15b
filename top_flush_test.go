package sluice

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestTopLastFlushWhilePeriodicHangs: when Redis stops answering during a
// periodic flush of many zones (each up to topFlushTimeout, one after
// another), Cleanup cancels it, so the last flush runs, and ends, within
// Cleanup's wait, while the client is open, instead of after it.
func TestTopLastFlushWhilePeriodicHangs(t *testing.T) {
	srv := redistest.Start(t)
	const zones = 8 // their flushes, hanging, far outlast Cleanup's wait
	names := make([]string, zones)
	cfg := []string{block("redis", "url "+srv.URL(), "timeout 1s")}
	for i := range names {
		names[i] = uniqueZone(fmt.Sprint("top_hang", i))
		cfg = append(cfg, floodZone(names[i]))
	}
	ctx, cancel := caddy.NewContext(testContext(t))
	defer cancel()
	h := newHandlerIn(t, ctx, rateLimit(cfg...))
	for range 3 {
		serveKey(t, h, "flooder")
	}
	shared, ok := sharedOf(h)
	if !ok {
		t.Fatal("no shared client")
	}
	admin := srv.Client(t)
	if err := admin.Do(context.Background(), "client", "pause", 30000).Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	defer func() { _ = admin.Do(context.Background(), "client", "unpause").Err() }()
	// the periodic flush is under way once it drained a zone's counts
	for deadline := time.Now().Add(2 * topFlushInterval); !anyDrained(h); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no periodic flush started")
		}
	}
	cancel() // Cleanup: Destruct waits for the last flush
	select {
	case <-shared.top.flushed():
	default:
		t.Errorf("Cleanup returned before the last flush of the top counts ended")
	}
}

// anyDrained reports whether a zone of h has no top counts pending.
func anyDrained(h *Handler) bool {
	for _, z := range h.zones {
		if z.top.pending.Len() == 0 {
			return true
		}
	}
	return false
}
