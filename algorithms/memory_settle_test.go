package algorithms_test

import (
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// TestMemorySettleRefund: on every algorithm, a refund of what a request
// took, at the same instant, gives the whole quota back; a settlement that
// changes nothing leaves the key alone.
func TestMemorySettleRefund(t *testing.T) {
	for _, a := range []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindow, algorithms.SlidingLog, algorithms.TokenBucket} {
		t.Run(string(a), func(t *testing.T) {
			m := algorithms.NewMemoryStore()
			limit := algorithms.Limit{Algorithm: a, Events: 3, Window: time.Minute}
			req := []algorithms.Request{{Key: "k", Limit: limit, Cost: 2}}
			d := m.AllowAt(t0, req)[0]
			if !d.Allowed || d.Remaining != 1 {
				t.Fatalf("got %+v, want allowed with remaining 1", d)
			}
			m.SettleAt(t0, []algorithms.Settlement{{Key: "k", Limit: limit, At: d.At}})
			if got := m.PeekAt(t0, req)[0].Remaining; got != 1 {
				t.Errorf("after an empty settlement: got remaining %d, want 1", got)
			}
			m.SettleAt(t0, []algorithms.Settlement{{Key: "k", Limit: limit, At: d.At, Delta: -2}})
			if got := m.PeekAt(t0, req)[0].Remaining; got != 3 {
				t.Errorf("after the refund: got remaining %d, want 3", got)
			}
		})
	}
}
