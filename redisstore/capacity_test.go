package redisstore

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/leasetwin"
)

var allAlgorithms = []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindow, algorithms.SlidingLog, algorithms.TokenBucket}

// TestCostAboveCapacityNeverReachesStore: a cost above the capacity is
// denied for a window by both stores without touching state: the memory
// store holds no key, and the Redis store answers with no Redis at all
// (its client points at a closed port).
func TestCostAboveCapacityNeverReachesStore(t *testing.T) {
	unreachable := New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}), Options{})
	for _, alg := range allAlgorithms {
		limit := algorithms.Limit{Algorithm: alg, Events: 5, Window: time.Minute}
		for _, cost := range []int64{6, 1 << 53, math.MaxInt64} {
			reqs := []algorithms.Request{
				{Key: "cap:other", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 100, Window: time.Hour}, Cost: 1},
				{Key: "cap:" + string(alg), Limit: limit, Cost: cost},
			}
			memory := leasetwin.NewMemoryStore()
			peek, err := unreachable.Peek(context.Background(), reqs)
			if err != nil {
				t.Fatalf("%s cost %d: redis peek: %v", alg, cost, err)
			}
			got := map[string][]algorithms.Decision{"memory": memory.AllowAt(t0, reqs), "redis peek": peek}
			if got["redis"], err = unreachable.AllowAt(context.Background(), t0, reqs); err != nil {
				t.Fatalf("%s cost %d: redis: %v", alg, cost, err)
			}
			for name, ds := range got {
				if algorithms.Admitted(reqs, ds) {
					t.Errorf("%s/%s cost %d: admitted, want denied", name, alg, cost)
				}
				if d := ds[1]; d.Allowed || d.RetryAfter != time.Minute || d.Remaining != 5 {
					t.Errorf("%s/%s cost %d: got %+v, want denied, RetryAfter 1m, Remaining 5", name, alg, cost, d)
				}
			}
			if n := memory.Len(); n != 0 {
				t.Errorf("%s cost %d: memory store holds %d keys, want 0", alg, cost, n)
			}
		}
	}
}

// TestDryRunZoneAboveCapacity: a dry-run zone whose cost is above its
// capacity reports a denial, and the request is decided by the others,
// which consume.
func TestDryRunZoneAboveCapacity(t *testing.T) {
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			reqs := []algorithms.Request{
				{Key: "dryover:enforced", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 5, Window: time.Minute}, Cost: 1},
				{Key: "dryover:shadow", Limit: algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: 3, Window: time.Minute}, Cost: math.MaxInt64, DryRun: true},
			}
			for i := range 2 {
				ds, err := store.AllowAt(context.Background(), t0, reqs)
				if err != nil {
					t.Fatal(err)
				}
				if !algorithms.Admitted(reqs, ds) || ds[1].Allowed {
					t.Fatalf("request %d: got admitted=%v shadow allowed=%v, want true, false", i, algorithms.Admitted(reqs, ds), ds[1].Allowed)
				}
				if got, want := ds[0].Remaining, int64(4-i); got != want {
					t.Errorf("request %d: enforced remaining got %d, want %d", i, got, want)
				}
			}
		})
	}
}
