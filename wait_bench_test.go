package sluice

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// BenchmarkWaitingPlaces is what a request of a max_delay zone pays for its
// place among the waiting (take, then release), on every core at once:
// all of one hot key, or each goroutine its own key.
func BenchmarkWaitingPlaces(b *testing.B) {
	limit := algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1, Window: time.Second, Burst: 1, MaxDelay: time.Second}
	for _, keys := range []string{"one", "many"} {
		b.Run(keys, func(b *testing.B) {
			w := &waiting{limit: defaultMaxWaiting, perKey: defaultMaxWaitingPerKey, logger: zap.NewNop()}
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				key := "hot"
				if keys == "many" {
					key = "key" + strconv.FormatInt(next.Add(1), 10)
				}
				reqs := []algorithms.Request{{Key: key, Limit: limit, Cost: 1}}
				for pb.Next() {
					p, _ := w.take(reqs)
					p.release()
				}
			})
		})
	}
}
