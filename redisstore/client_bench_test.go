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
