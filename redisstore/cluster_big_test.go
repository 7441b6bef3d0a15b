package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestClusterRefundLargeBucket: the refund of a token bucket stored in the
// large format ("<events> <fraction> <time>") gives back exactly the cost,
// as the refund of a small one does.
func TestClusterRefundLargeBucket(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	store := New(cluster.Client(t), Options{})
	ctx := context.Background()
	id := rand.Int64()
	// one token a year back: no refill during the test
	loose := algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1, Window: algorithms.MaxWindow, Burst: 1_000_000_000}
	tight := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Hour}
	reqs := []algorithms.Request{
		{Key: fmt.Sprintf("loose:%d:{a}", id), Limit: loose, Cost: 2},
		{Key: fmt.Sprintf("tight:%d:{b}", id), Limit: tight, Cost: 1},
	}
	for i, want := range []bool{true, false, false, false} {
		ds, err := store.Allow(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		if got := algorithms.Admitted(reqs, ds); got != want {
			t.Fatalf("request %d: got admitted=%v, want %v", i, got, want)
		}
	}
	ds, err := store.Allow(ctx, reqs[:1])
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ds[0].Remaining, int64(1_000_000_000-4); got != want {
		t.Errorf("loose zone after three refunded denials: remaining %d, want %d", got, want)
	}
}
