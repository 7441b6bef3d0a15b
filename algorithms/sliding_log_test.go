package algorithms_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// BenchmarkMemorySlidingLog: one key of a large sliding_log limit, kept
// full, every request admitted (one entry expires per request): the cost of
// one decision should not grow with the log.
// Run: go test -run '^$' -bench MemorySlidingLog ./algorithms
func BenchmarkMemorySlidingLog(b *testing.B) {
	for _, events := range []int64{100, 10_000} {
		b.Run(fmt.Sprint("events=", events), func(b *testing.B) {
			m := algorithms.NewMemoryStore()
			limit := algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: events, Window: time.Second}
			reqs := []algorithms.Request{{Key: "bench", Limit: limit, Cost: 1}}
			step := time.Second / time.Duration(events) // one entry leaves per request
			now := t0
			for range events {
				now = now.Add(step)
				m.AllowAt(now, reqs)
			}
			for b.Loop() {
				now = now.Add(step)
				if !m.AllowAt(now, reqs)[0].Allowed {
					b.Fatal("denied")
				}
			}
		})
	}
}
