package quota

import (
	"testing"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// A ban tripped by this holder's own call drops its leases of the key at
// once: Take, which the backend tries before the deny cache, would admit
// the key from them until the reset channel's announcement came.
func TestQuotaLeasesDropOnTheirBan(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	r := leasing("k", 1000)
	r.BanSeconds = 60
	f.warm(t, r)
	if f.leftOf(r) == 0 {
		t.Fatal("no lease held after warming")
	}
	big := r
	big.Cost = r.Limit.Events // more than is free, with the units out counted as free
	if d := f.allow(t, big)[0]; !d.BanStarted {
		t.Fatalf("got %+v, want the ban tripped", d)
	}
	if left := f.leftOf(r); left != 0 {
		t.Errorf("%d leased units still held after the key's ban tripped", left)
	}
	if ds := f.q.Take([]algorithms.Request{r}); ds != nil {
		t.Errorf("Take admitted a banned key from a lease: %+v", ds)
	}
}
