package algorithms_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// BenchmarkMaxDelayMemory: a memory-store decision on a token bucket
// without and with max_delay, held at the reservation limit (every other
// request reserves, the rest are denied).
func BenchmarkMaxDelayMemory(b *testing.B) {
	for _, maxDelay := range []time.Duration{0, time.Second} {
		b.Run(fmt.Sprint("max_delay=", maxDelay), func(b *testing.B) {
			store := algorithms.NewMemoryStore()
			limit := algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 10, Window: time.Second, Burst: 1, MaxDelay: time.Second}
			limit.MaxDelay = maxDelay
			reqs := []algorithms.Request{{Key: "bench", Limit: limit, Cost: 1}}
			now := t0
			for b.Loop() {
				now = now.Add(50 * time.Millisecond)
				store.AllowAt(now, reqs)
			}
		})
	}
}
