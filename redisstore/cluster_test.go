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

// TestClusterAllOrNothing: on Redis Cluster the zones of one request live
// in different slots; when one denies, the others are refunded, for every
// algorithm.
func TestClusterAllOrNothing(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	store := New(cluster.Client(t), Options{})
	tight := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Hour}
	for _, alg := range []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindow, algorithms.SlidingLog, algorithms.TokenBucket} {
		t.Run(string(alg), func(t *testing.T) {
			ctx := context.Background()
			loose := algorithms.Limit{Algorithm: alg, Events: 10, Window: time.Hour}
			id := rand.Int64()
			reqs := []algorithms.Request{
				// hash tags {a} and {b}: slots 15495 and 3300, on different masters
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
				if !want && ds[0].Remaining != 8 {
					t.Errorf("request %d: loose zone reports remaining %d, want 8", i, ds[0].Remaining)
				}
			}
			ds, err := store.Allow(ctx, reqs[:1])
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ds[0].Remaining, int64(6); got != want {
				t.Errorf("loose zone after three refunded denials: remaining %d, want %d", got, want)
			}
		})
	}
}

// TestClusterConcurrentExactness: 200 concurrent two-zone requests on
// Cluster; the tight zone admits exactly its limit and the loose zone keeps
// exactly what the admitted requests took, refunds included.
func TestClusterConcurrentExactness(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	store := New(cluster.Client(t), Options{})
	id := rand.Int64()
	loose := algorithms.Request{Key: fmt.Sprintf("loose:%d:{a}", id), Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1000, Window: time.Hour}, Cost: 1}
	tight := algorithms.Request{Key: fmt.Sprintf("tight:%d:{b}", id), Limit: algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: 50, Window: time.Hour}, Cost: 1}
	reqs := []algorithms.Request{loose, tight}
	if got, want := admitConcurrently(t, store, reqs, 200), int64(50); got != want {
		t.Errorf("admitted: got %d, want %d", got, want)
	}
	ds, err := store.Allow(context.Background(), []algorithms.Request{loose})
	if err != nil {
		t.Fatal(err)
	}
	// 1000 - 50 admitted - this request; a unit may have refilled (one per 3.6 s)
	if got := ds[0].Remaining; got < 949 || got > 950 {
		t.Errorf("loose zone remaining: got %d, want 949 (950 if a token refilled)", got)
	}
}
