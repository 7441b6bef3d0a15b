package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// BenchmarkGiveBackBurst: the give-backs of n leases ending at once (a
// fixed window's edge, a reload, a stop) sent together, as a sweep sends
// them, while another client PINGs Redis: the longest one of their calls
// ran in Redis (its SLOWLOG: what any command, a decision's too, may wait
// behind), the longest a PING waited as this process saw it (its own
// scheduling and GC included), and the whole burst. make bench reports
// them.
func BenchmarkGiveBackBurst(b *testing.B) {
	for _, n := range []int{20_000, 65_536} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			srv := redistest.Start(b)
			client := srv.Client(b)
			s := New(client, Options{})
			pinger := srv.Client(b)
			ctx := context.Background()
			var callMax, pingMax, total time.Duration
			for b.Loop() {
				b.StopTimer()
				gbs := grantLeases(b, s, n)
				if err := client.ConfigSet(ctx, "slowlog-max-len", "1000000").Err(); err != nil {
					b.Fatal(err)
				}
				client.ConfigSet(ctx, "slowlog-log-slower-than", "0")
				client.SlowLogReset(ctx)
				stop, pings := make(chan struct{}), make(chan time.Duration, 1)
				go func() { pings <- pingWhile(ctx, b, pinger, stop) }()
				b.StartTimer()
				start := time.Now()
				if err := s.GiveBack(ctx, gbs); err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
				b.StopTimer()
				close(stop)
				pingMax = max(pingMax, <-pings)
				callMax = max(callMax, longestCall(ctx, b, client))
				client.ConfigSet(ctx, "slowlog-log-slower-than", "10000")
				b.StartTimer()
			}
			b.ReportMetric(float64(callMax.Microseconds())/1000, "call-max-ms")
			b.ReportMetric(float64(pingMax.Microseconds())/1000, "ping-max-ms")
			b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "all-ms")
		})
	}
}

// longestCall is the longest script call in c's SLOWLOG.
func longestCall(ctx context.Context, b *testing.B, c *redis.Client) time.Duration {
	logs, err := c.SlowLogGet(ctx, -1).Result()
	if err != nil {
		b.Fatal(err)
	}
	var longest time.Duration
	for _, l := range logs {
		if len(l.Args) > 0 && (strings.EqualFold(l.Args[0], "fcall") || strings.EqualFold(l.Args[0], "evalsha")) {
			longest = max(longest, l.Duration)
		}
	}
	return longest
}

// grantLeases grants a 10 s lease of 5 units on each of n keys (from 64
// senders, as many instances' requests would arrive) and returns their
// give-backs.
func grantLeases(b *testing.B, s *Store, n int) []algorithms.GiveBack {
	b.Helper()
	l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1000, Window: time.Hour}
	gbs := make([]algorithms.GiveBack, n)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	run := fmt.Sprint(time.Now().UnixNano())
	for w := range 64 {
		wg.Go(func() {
			for i := w; i < n; i += 64 {
				r := algorithms.Request{Key: fmt.Sprintf("burst:%s:{%d}", run, i), Limit: l, Cost: 1,
					Quota: algorithms.QuotaAsk{For: algorithms.MaxQuotaLease, Units: 5, Holder: "bench"}}
				ds, err := s.Allow(context.Background(), []algorithms.Request{r})
				if err != nil || ds[0].Quota.Units != 5 {
					errs <- fmt.Errorf("grant %d: %+v, %v", i, ds, err)
					return
				}
				gbs[i] = algorithms.GiveBackOf(r, ds[0], 5)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return gbs
}

// pingWhile PINGs c until stop is closed and returns the longest a PING
// took.
func pingWhile(ctx context.Context, b *testing.B, c *redis.Client, stop <-chan struct{}) time.Duration {
	var longest time.Duration
	for {
		select {
		case <-stop:
			return longest
		default:
		}
		start := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			b.Error(err)
			return longest
		}
		longest = max(longest, time.Since(start))
	}
}
