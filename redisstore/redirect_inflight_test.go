package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestClusterSlotMovingKeepsInFlight: a batch none of whose slots is
// served holds its place in flight while it is sent again: the request
// queued behind it waits, instead of a new call going out beside every
// retry (calls out would then grow past in_flight, all against a slot, or
// a cluster, that answers none).
func TestClusterSlotMovingKeepsInFlight(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 5, Window: time.Hour}
	client := cluster.Client(t)
	hook := new(movingHook)
	client.AddHook(hook)
	store := New(client, Options{InFlight: 1})
	store.runner.slotRetries = 20 * time.Second // the test mends the slot
	key, mend := brokenSlot(t, cluster, client, slotBreaks[0])
	b := store.batcher
	var out, most atomic.Int64 // calls out now, and at most
	sent, send := make(chan struct{}, 1), b.send
	b.send = func(ctx context.Context, batch []*pending, e *early) {
		n := out.Add(1)
		defer out.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case sent <- struct{}{}:
		default:
		}
		send(ctx, batch, e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reqs := []algorithms.Request{{Key: key, Limit: limit, Cost: 1}}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	allow := func() {
		if _, err := store.Allow(ctx, reqs); err != nil {
			errs <- err
		}
	}
	wg.Go(allow)
	waitSent(t, sent, "the first call")
	wg.Go(allow)
	waitBatcher(t, b, "the second request queued or sent", func(b *batcher) bool { return len(b.queue) == 1 || most.Load() > 1 })
	// several answers "moving" later (each a retry's chance to hand on)
	for deadline := time.Now().Add(10 * time.Second); hook.n.Load() < 10 && most.Load() == 1 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if got, want := most.Load(), int64(1); got != want {
		t.Errorf("calls out at once while every slot moved: got %d, want %d (in_flight)", got, want)
	}
	mend()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("after the mend: %v", err)
	}
}
