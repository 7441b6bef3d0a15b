package algorithms_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestSlidingLogMatchesWithSettlements drives one random sequence of
// admissions (some at a clock that went back a little, or at one µs
// twice), refunds and debts through the memory store and Redis: every
// decision is equal, Retry-After included.
func TestSlidingLogMatchesWithSettlements(t *testing.T) {
	ss := settlingStores(t)
	memory, redisStore := ss["memory"], ss["redis"]
	ctx := context.Background()
	for _, limit := range []algorithms.Limit{
		{Algorithm: algorithms.SlidingLog, Events: 7, Window: 10 * time.Second},
		{Algorithm: algorithms.SlidingLog, Events: 10_000, Window: time.Minute},
	} {
		t.Run(fmt.Sprint(limit.Events), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, uint64(limit.Events)))
			key := fmt.Sprintf("log-settle:%d", rng.Int64())
			now := t0
			var admitted []int64 // times of admissions, for settlements
			for i := range 800 {
				switch r := rng.IntN(10); {
				case r == 0 && len(admitted) > 0: // refund or debt of an earlier admission
					at := admitted[rng.IntN(len(admitted))]
					delta := rng.Int64N(limit.Events) - limit.Events/2
					s := []algorithms.Settlement{{Key: key, Limit: limit, At: at, Delta: delta}}
					if err := memory.SettleAt(ctx, now, s); err != nil {
						t.Fatal(err)
					}
					if err := redisStore.SettleAt(ctx, now, s); err != nil {
						t.Fatal(err)
					}
					continue
				case r == 1: // the clock went back
					now = now.Add(-time.Duration(rng.Int64N(int64(limit.Window / 20))))
				case r == 2: // the same µs again
				default:
					now = now.Add(time.Duration(rng.Int64N(int64(limit.Window / 6))))
				}
				reqs := []algorithms.Request{{Key: key, Limit: limit, Cost: randomCost(rng, limit.Events)}}
				want, _ := memory.AllowAt(ctx, now, reqs)
				got, err := redisStore.AllowAt(ctx, now, reqs)
				if err != nil {
					t.Fatal(err)
				}
				if got[0] != want[0] {
					t.Fatalf("step %d (cost %d): redis %+v, memory %+v", i, reqs[0].Cost, got[0], want[0])
				}
				if got[0].Allowed {
					admitted = append(admitted, got[0].At)
				}
			}
		})
	}
}

// TestSlidingLogCostIsNotWork: a request's cost is units, not entries. 64
// keys of events 10,000 each take one request of cost 10,000 and one of
// cost 1 that is denied; each key then holds one entry beside its total
// in Redis (the first release held 10,000 members), and the denied
// request's Retry-After is still exact (the whole window).
func TestSlidingLogCostIsNotWork(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	store := algorithms.NewRedisStore(client)
	ctx := context.Background()
	limit := algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: 10_000, Window: time.Hour}
	for k := range 64 {
		key := fmt.Sprintf("cost-work:%d", k)
		ds, err := store.AllowAt(ctx, t0, []algorithms.Request{{Key: key, Limit: limit, Cost: 10_000}})
		if err != nil || !ds[0].Allowed {
			t.Fatalf("key %d: got %+v, %v, want admitted", k, ds, err)
		}
		ds, err = store.AllowAt(ctx, t0.Add(time.Second), []algorithms.Request{{Key: key, Limit: limit, Cost: 1}})
		if err != nil || ds[0].Allowed || ds[0].RetryAfter != time.Hour-time.Second {
			t.Fatalf("key %d: got %+v, %v, want denied, retry %v", k, ds, err, time.Hour-time.Second)
		}
		if got, err := client.ZCard(ctx, key).Result(); err != nil || got > 2 {
			t.Fatalf("key %d: got %d members (%v), want at most 2 (one entry and the total)", k, got, err)
		}
	}
	// the memory store holds one entry too: bytes per request, not per unit
	m := algorithms.NewMemoryStore()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for k := range 100 {
		m.AllowAt(t0, []algorithms.Request{{Key: fmt.Sprint("cost-work:", k), Limit: limit, Cost: 10_000}})
	}
	runtime.ReadMemStats(&after)
	if got := (after.TotalAlloc - before.TotalAlloc) / 100; got > 4096 {
		t.Errorf("memory store: got %d bytes allocated per request of cost 10,000, want at most 4096", got)
	}
}
