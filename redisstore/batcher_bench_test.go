package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// redisCPU is the CPU time redis-server has used (INFO cpu, user + sys).
func redisCPU(b *testing.B, c *redis.Client) time.Duration {
	b.Helper()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		for _, field := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(line, field); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatalf("INFO cpu line %q: %v", line, err)
				}
				total += f
			}
		}
	}
	return time.Duration(total * float64(time.Second))
}

// redisWork is what Redis had spent at one moment: its CPU, and the calls
// of the script commands named and the time inside them (commandstats).
type redisWork struct {
	cpu         time.Duration
	calls, usec int64
	commands    []string
}

func measureRedis(b *testing.B, c *redis.Client, commands ...string) redisWork {
	b.Helper()
	return redisWork{redisCPU(b, c), commandCalls(b, c, commands...), commandStat(b, c, "usec", commands...), commands}
}

// report reports what Redis spent since w, per op of n: CPU, script calls,
// and the time inside the calls, without their I/O and parsing.
func (w redisWork) report(b *testing.B, c *redis.Client, n float64) {
	b.Helper()
	now := measureRedis(b, c, w.commands...)
	b.ReportMetric(float64(now.cpu-w.cpu)/n, "redis-cpu-ns/op")
	b.ReportMetric(float64(now.calls-w.calls)/n, "calls/op")
	b.ReportMetric(float64(now.usec-w.usec)*1000/n, "script-ns/op")
}

// selfCPU is the CPU time this process has used (the client side).
func selfCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRedisAllow decides one-zone requests on 10^5 random keys (all
// admitted) from 1 and from 32 goroutines, one EVALSHA per request as
// before batching ("before"), and batched, on Functions and on scripts,
// with 1 (the default), 2 and 4 calls in flight. Besides ns/op (wall time per decision)
// it reports client CPU, Redis CPU (INFO cpu), Redis calls and Redis time
// inside them (INFO commandstats usec) per decision.
// Run: go test -run '^$' -bench RedisAllow -benchtime 20000x ./redisstore
func BenchmarkRedisAllow(b *testing.B) {
	variants := []struct {
		name string
		opts Options
	}{
		{"before", Options{InFlight: -1, Scripts: true}},
		{"unbatched-functions", Options{InFlight: -1}},
		{"batched-scripts", Options{Scripts: true}},
		{"batched-functions", Options{}}, // DefaultInFlight: 1
		{"batched-functions-inflight2", Options{InFlight: 2}},
		{"batched-functions-inflight4", Options{InFlight: 4}},
	}
	srv := redistest.Start(b)
	stats := srv.Client(b)
	for _, alg := range []algorithms.Algorithm{algorithms.FixedWindow, algorithms.TokenBucket} {
		for _, v := range variants {
			for _, goroutines := range []int{1, 32} {
				b.Run(fmt.Sprintf("%s/%s/goroutines=%d", alg, v.name, goroutines), func(b *testing.B) {
					store := New(srv.Client(b), v.opts)
					if err := store.Warm(context.Background()); err != nil {
						b.Fatal(err)
					}
					benchAllow(b, store, stats, alg, goroutines, 0)
				})
			}
		}
	}
}

// benchAllow runs b.N one-zone decisions on store from goroutines, each
// with a timeout as the Caddy module gives it (0: none), and reports what
// each cost the client and Redis.
func benchAllow(b *testing.B, store algorithms.Store, stats *redis.Client, alg algorithms.Algorithm, goroutines int, timeout time.Duration) {
	b.Helper()
	limit := algorithms.Limit{Algorithm: alg, Events: 1 << 40, Window: time.Hour}
	var next atomic.Int64
	work0, self0 := measureRedis(b, stats, "fcall", "evalsha", "eval"), selfCPU(b)
	b.ResetTimer()
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				reqs := []algorithms.Request{{Key: "bench:" + strconv.FormatInt(i*7919%100_000, 10), Limit: limit, Cost: 1}}
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if timeout > 0 {
					ctx, cancel = context.WithTimeout(ctx, timeout)
				}
				_, err := store.Allow(ctx, reqs)
				cancel()
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
	b.ReportMetric(float64(selfCPU(b)-self0)/n, "client-cpu-ns/op")
	work0.report(b, stats, n)
}

// BenchmarkRedisClientOptions decides one-zone requests (fixed_window,
// 10^5 random keys, all admitted, a 100 ms timeout each as the Caddy module
// sets) through clients built with different go-redis options: "module" is
// what the module's redis_config.go builds, each other variant changes one
// option of it. It reports what benchAllow does.
// Run: go test -run '^$' -bench RedisClientOptions -benchtime 20000x ./redisstore
func BenchmarkRedisClientOptions(b *testing.B) {
	variants := []struct {
		name   string
		modify func(*redis.Options)
	}{
		{"module", func(*redis.Options) {}},
		{"resp2", func(o *redis.Options) { o.Protocol = 2 }},
		{"no-context-timeout", func(o *redis.Options) { o.ContextTimeoutEnabled = false }},
		{"buffers-4k", func(o *redis.Options) { o.ReadBufferSize, o.WriteBufferSize = 4096, 4096 }},
	}
	srv := redistest.Start(b)
	stats := srv.Client(b)
	for _, v := range variants {
		for _, goroutines := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/goroutines=%d", v.name, goroutines), func(b *testing.B) {
				opts := &redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, DialerRetries: 1}
				v.modify(opts)
				client := redis.NewClient(opts)
				b.Cleanup(func() { _ = client.Close() })
				store := New(client, Options{})
				if err := store.Warm(context.Background()); err != nil {
					b.Fatal(err)
				}
				benchAllow(b, store, stats, algorithms.FixedWindow, goroutines, 100*time.Millisecond)
			})
		}
	}
}
