package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

func usedMemory(b *testing.B, c *redis.Client) int64 {
	b.Helper()
	info := redistest.ReadInfo(b, c, "memory")
	if _, ok := info["used_memory"]; !ok {
		b.Fatal("no used_memory in INFO memory")
	}
	return info.Int("used_memory")
}

// BenchmarkRedisBytesPerKey fills a fresh Redis with 10^5 keys of each
// algorithm (one request each, the key shape Sluice writes) and reports
// Redis's memory per key, from INFO used_memory and from MEMORY USAGE of
// one key. Run: go test -run '^$' -bench BytesPerKey -benchtime 1x ./redisstore
func BenchmarkRedisBytesPerKey(b *testing.B) {
	const keys = 100_000
	for _, alg := range []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindow, algorithms.SlidingLog, algorithms.TokenBucket} {
		b.Run(string(alg), func(b *testing.B) {
			for b.Loop() {
				srv := redistest.Start(b)
				client := srv.Client(b)
				store := New(client, Options{})
				limit := algorithms.Limit{Algorithm: alg, Events: 100, Window: time.Hour}
				before := usedMemory(b, client)
				ctx := context.Background()
				for i := range keys {
					// sluice:<zone>:{<22 base64 chars>}, as the handler writes
					key := fmt.Sprintf("sluice:api:{%022d}", i)
					if _, err := store.Allow(ctx, []algorithms.Request{{Key: key, Limit: limit, Cost: 1}}); err != nil {
						b.Fatal(err)
					}
				}
				after := usedMemory(b, client)
				usage, err := client.MemoryUsage(ctx, fmt.Sprintf("sluice:api:{%022d}", 0)).Result()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(after-before)/keys, "bytes/key")
				b.ReportMetric(float64(usage), "memory-usage-bytes")
				srv.Stop()
			}
		})
	}
}
