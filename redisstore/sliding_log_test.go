package redisstore

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
	store := New(client, Options{})
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

// BenchmarkSlidingLogCost measures what a request's cost buys in Redis and
// in the memory store (issue 17, item 2): 64 sliding_log keys of events
// 10,000, each given one request of cost 10,000 in one batch (one call).
// It reports Redis's used_memory per key (and MEMORY USAGE of one), the slowest call in SLOWLOG
// (µs) and the memory store's heap bytes per request.
// Run: go test -run '^$' -bench SlidingLogCost -benchtime 1x ./redisstore
func BenchmarkSlidingLogCost(b *testing.B) {
	const keys, cost = 64, 10_000
	limit := algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: cost, Window: time.Hour}
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b)
		c := srv.Client(b)
		s := New(c, Options{})
		ctx := context.Background()
		if err := s.Warm(ctx); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			id := rand.Int64()
			c.ConfigSet(ctx, "slowlog-log-slower-than", "0")
			c.SlowLogReset(ctx)
			before := redistest.ReadInfo(b, c, "memory").Int("used_memory")
			batch := make([]*pending, keys)
			for k := range batch {
				key := fmt.Sprintf("cost:%d:%d", id, k)
				batch[k] = &pending{mode: modeConsume, reqs: []algorithms.Request{{Key: key, Limit: limit, Cost: cost}}}
			}
			s.sendBatch(ctx, batch)
			for _, p := range batch {
				if p.err != nil || !p.ds[0].Allowed {
					b.Fatalf("got %v, %+v, want admitted", p.err, p.ds)
				}
			}
			after := redistest.ReadInfo(b, c, "memory").Int("used_memory")
			logs, err := c.SlowLogGet(ctx, 128).Result()
			if err != nil {
				b.Fatal(err)
			}
			var slowest time.Duration
			for _, l := range logs {
				slowest = max(slowest, l.Duration)
			}
			usage, err := c.MemoryUsage(ctx, batch[0].reqs[0].Key).Result()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(after-before)/keys, "redis-bytes/key")
			b.ReportMetric(float64(usage), "memory-usage-bytes/key")
			b.ReportMetric(float64(slowest.Microseconds()), "slowest-call-µs")
		}
	})
	// the worst denial: a log of 10,000 entries of one unit each, and a
	// request of cost 5,000 whose Retry-After needs the middle one
	b.Run("redis-worst-denial", func(b *testing.B) {
		srv := redistest.Start(b)
		c := srv.Client(b)
		s := New(c, Options{})
		ctx := context.Background()
		key := fmt.Sprint("walk:", rand.Int64())
		now := time.Unix(1_800_000_000, 0)
		batch := make([]*pending, 0, maxBatchRequests)
		for i := range cost {
			at := fmt.Sprint(now.Add(time.Duration(i) * time.Microsecond).UnixMicro())
			batch = append(batch, &pending{mode: modeConsume, now: at, reqs: []algorithms.Request{{Key: key, Limit: limit, Cost: 1}}})
			if len(batch) == maxBatchRequests || i == cost-1 {
				s.sendBatch(ctx, batch)
				batch = batch[:0]
			}
		}
		for b.Loop() {
			c.ConfigSet(ctx, "slowlog-log-slower-than", "0")
			c.SlowLogReset(ctx)
			// half the log must leave: the longest walk from either end
			ds, err := s.AllowAt(ctx, now.Add(time.Second), []algorithms.Request{{Key: key, Limit: limit, Cost: cost / 2}})
			if err != nil || ds[0].Allowed || ds[0].RetryAfter != time.Hour-time.Second+(cost/2-1)*time.Microsecond {
				b.Fatalf("got %+v, %v, want denied until the middle entry leaves", ds, err)
			}
			logs, err := c.SlowLogGet(ctx, 128).Result()
			if err != nil {
				b.Fatal(err)
			}
			var slowest time.Duration
			for _, l := range logs {
				slowest = max(slowest, l.Duration)
			}
			b.ReportMetric(float64(slowest.Microseconds()), "slowest-call-µs")
		}
	})
	b.Run("memory", func(b *testing.B) {
		for b.Loop() {
			m := algorithms.NewMemoryStore()
			now := time.Unix(1_700_000_000, 0)
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			before := ms.HeapAlloc
			for k := range 1000 {
				reqs := []algorithms.Request{{Key: fmt.Sprint("cost:", k), Limit: limit, Cost: cost}}
				if !m.AllowAt(now, reqs)[0].Allowed {
					b.Fatal("denied")
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(int64(ms.HeapAlloc)-int64(before))/1000, "heap-bytes/request")
			runtime.KeepAlive(m)
		}
	})
}
