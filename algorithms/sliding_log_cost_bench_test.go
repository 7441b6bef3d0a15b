package algorithms

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// BenchmarkSlidingLogCost measures what a request's cost buys in Redis and
// in the memory store (issue 17, item 2): 64 sliding_log keys of events
// 10,000, each given one request of cost 10,000 in one batch (one call).
// It reports Redis's used_memory per key (and MEMORY USAGE of one), the slowest call in SLOWLOG
// (µs) and the memory store's heap bytes per request.
// Run: go test -run '^$' -bench SlidingLogCost -benchtime 1x ./algorithms
func BenchmarkSlidingLogCost(b *testing.B) {
	const keys, cost = 64, 10_000
	limit := Limit{Algorithm: SlidingLog, Events: cost, Window: time.Hour}
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b)
		c := srv.Client(b)
		s := NewRedisStoreWith(c, RedisOptions{})
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
				batch[k] = &pending{mode: modeConsume, reqs: []Request{{Key: key, Limit: limit, Cost: cost}}}
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
		s := NewRedisStoreWith(c, RedisOptions{})
		ctx := context.Background()
		key := fmt.Sprint("walk:", rand.Int64())
		now := time.Unix(1_800_000_000, 0)
		batch := make([]*pending, 0, maxBatchRequests)
		for i := range cost {
			at := fmt.Sprint(now.Add(time.Duration(i) * time.Microsecond).UnixMicro())
			batch = append(batch, &pending{mode: modeConsume, now: at, reqs: []Request{{Key: key, Limit: limit, Cost: 1}}})
			if len(batch) == maxBatchRequests || i == cost-1 {
				s.sendBatch(ctx, batch)
				batch = batch[:0]
			}
		}
		for b.Loop() {
			c.ConfigSet(ctx, "slowlog-log-slower-than", "0")
			c.SlowLogReset(ctx)
			// half the log must leave: the longest walk from either end
			ds, err := s.AllowAt(ctx, now.Add(time.Second), []Request{{Key: key, Limit: limit, Cost: cost / 2}})
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
			m := NewMemoryStore()
			now := time.Unix(1_700_000_000, 0)
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			before := ms.HeapAlloc
			for k := range 1000 {
				reqs := []Request{{Key: fmt.Sprint("cost:", k), Limit: limit, Cost: cost}}
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
