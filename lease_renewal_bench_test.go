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

// BenchmarkLeaseStartStop: what one request's lease costs the renewer (its
// start and its stop) while held other leases are renewed on the same
// store, as long-lived WebSockets would hold them. The cost must not grow
// with held.
func BenchmarkLeaseStartStop(b *testing.B) {
	for _, held := range []int{10, 100_000} {
		b.Run(fmt.Sprint("held=", held), func(b *testing.B) {
			store := &nopSettler{id: held}
			limit := algorithms.Limit{Algorithm: algorithms.Concurrency, Events: 1, Window: time.Hour}
			lease := func(id string) []algorithms.Request {
				return []algorithms.Request{{Key: "bench:" + id, Limit: limit, Cost: 1, Lease: id, Settles: true}}
			}
			allowed := []algorithms.Decision{{Allowed: true}}
			var longLived [][]algorithms.Request
			for i := range held {
				reqs := lease(fmt.Sprint("held-", i))
				leaseRenewals.start(store, nil, reqs, allowed)
				longLived = append(longLived, reqs)
			}
			defer func() {
				for _, reqs := range longLived {
					leaseRenewals.stop(store, reqs)
				}
			}()
			reqs := lease("request")
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				leaseRenewals.start(store, nil, reqs, allowed)
				leaseRenewals.stop(store, reqs)
			}
		})
	}
}
