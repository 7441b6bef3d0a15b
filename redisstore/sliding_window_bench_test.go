package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// BenchmarkSlidingWindowRedis decides one-zone sliding_window requests on
// Redis (batched Functions, the default store) from 32 goroutines, and
// reports, per decision, Redis CPU (INFO cpu) and the time inside the
// FCALLs (INFO commandstats usec, without their I/O):
//   - fresh: 10^5 keys in turn, each with a slot or two in use (the common
//     case: most keys are seen a few times a window), all admitted;
//   - busy: 100 keys on a simulated clock, each seen every 5 ms over a 1 s
//     window of 50 ms slots (every slot in use), all admitted;
//   - denied: the same at 10 a second, nearly all denied.
//
// With memory-usage-bytes: MEMORY USAGE of one busy key at the end.
// Run: go test -run '^$' -bench SlidingWindowRedis -benchtime 50000x ./algorithms
func BenchmarkSlidingWindowRedis(b *testing.B) {
	srv := redistest.Start(b)
	stats := srv.Client(b)
	cases := []struct {
		name   string
		keys   int64
		events int64
		window time.Duration
		step   time.Duration // simulated time per decision; 0: Redis TIME
	}{
		{"fresh", 100_000, 1_000_000_000, time.Hour, 0},
		{"busy", 100, 1_000_000_000, time.Second, 50 * time.Microsecond},
		{"denied", 100, 10, time.Second, 50 * time.Microsecond},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			store := New(srv.Client(b), Options{})
			if err := store.Warm(context.Background()); err != nil {
				b.Fatal(err)
			}
			limit := algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: c.events, Window: c.window}
			prefix := fmt.Sprintf("swbench:%s:%d:", c.name, time.Now().UnixNano())
			base := time.Now()
			var next atomic.Int64
			calls0, redis0 := commandCalls(b, stats, "fcall"), redisCPU(b, stats)
			usec0 := commandStat(b, stats, "usec", "fcall")
			b.ResetTimer()
			var wg sync.WaitGroup
			for range 32 {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						reqs := []algorithms.Request{{Key: prefix + strconv.FormatInt(i*7919%c.keys, 10), Limit: limit, Cost: 1}}
						var err error
						if c.step == 0 {
							_, err = store.Allow(context.Background(), reqs)
						} else {
							_, err = store.AllowAt(context.Background(), base.Add(time.Duration(i)*c.step), reqs)
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(float64(redisCPU(b, stats)-redis0)/n, "redis-cpu-ns/op")
			b.ReportMetric(float64(commandCalls(b, stats, "fcall")-calls0)/n, "calls/op")
			b.ReportMetric(float64(commandStat(b, stats, "usec", "fcall")-usec0)*1000/n, "script-ns/op")
			usage, err := stats.MemoryUsage(context.Background(), prefix+"1", 0).Result()
			if err == nil {
				b.ReportMetric(float64(usage), "memory-usage-bytes")
			}
			n2, _ := stats.StrLen(context.Background(), prefix+"1").Result()
			b.ReportMetric(float64(n2), "state-bytes")
		})
	}
}
