package sluice

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// nopSettler is a store whose settlements do nothing and never fail.
type nopSettler struct {
	algorithms.Store // the rest of the contract, which renewals never call
	id               int
}

func (*nopSettler) Settle(context.Context, []algorithms.Settlement) error { return nil }

// BenchmarkSlotStartStop: what one request's slot costs the renewer (its
// start and its stop) while held other slots are renewed on the same
// store, as long-lived WebSockets would hold them. The cost must not grow
// with held.
func BenchmarkSlotStartStop(b *testing.B) {
	for _, held := range []int{10, 100_000} {
		b.Run(fmt.Sprint("held=", held), func(b *testing.B) {
			store := &nopSettler{id: held}
			limit := algorithms.Limit{Algorithm: algorithms.Concurrency, Events: 1, Window: time.Hour}
			slot := func(id string) []algorithms.Request {
				return []algorithms.Request{{Key: "bench:" + id, Limit: limit, Cost: 1, Slot: id, Settles: true}}
			}
			allowed := []algorithms.Decision{{Allowed: true}}
			var longLived [][]algorithms.Request
			for i := range held {
				reqs := slot(fmt.Sprint("held-", i))
				slotRenewals.start(store, nil, reqs, allowed)
				longLived = append(longLived, reqs)
			}
			defer func() {
				for _, reqs := range longLived {
					slotRenewals.stop(store, reqs)
				}
			}()
			reqs := slot("request")
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				slotRenewals.start(store, nil, reqs, allowed)
				slotRenewals.stop(store, reqs)
			}
		})
	}
}
