package quota

import (
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

func TestQuotaLeasesEndByTheStoresClock(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	f.store.rtt.Store(int64(10 * time.Millisecond))
	r := leasing("k", 100_000)
	r.Cost = 10 // a lease asked on the second request, a span later
	f.allow(t, r)
	f.clock.Advance(demandSpan(r.Quota.For))
	sent := f.clock.Now()
	d := f.allow(t, r)[0]
	if d.Quota.Units == 0 {
		t.Fatalf("no grant: %+v", d)
	}
	storeLife := time.Duration(d.Quota.End-d.At) * time.Microsecond
	want := sent.Add(storeLife*1000/1001 - time.Millisecond)
	sh := &f.q.shards[f.q.shardOf("k")]
	sh.mu.Lock()
	got := sh.find("k").leases[0].end
	sh.mu.Unlock()
	if !got.Equal(want) {
		t.Fatalf("lease ends at %v after the send, want %v", got.Sub(sent), want.Sub(sent))
	}
	f.clock.Advance(want.Sub(f.clock.Now()) - time.Microsecond)
	r.Cost = 1
	before := f.store.requests.Load()
	if d := f.allow(t, r)[0]; !d.Leased || f.store.requests.Load() != before {
		t.Fatalf("just before its end, the lease did not serve: %+v", d)
	}
	f.q.Forget("k") // the lease and its renewals: the next grant is the only lease
	if d := f.allow(t, r)[0]; d.Quota.Units == 0 {
		t.Fatalf("no grant: %+v", d)
	}
	sh.mu.Lock()
	end := sh.find("k").leases[0].end
	sh.mu.Unlock()
	f.clock.Advance(end.Sub(f.clock.Now()))
	before = f.store.requests.Load()
	if d := f.allow(t, r)[0]; d.Leased || f.store.requests.Load() != before+1 {
		t.Errorf("at its end, a lease served: %+v", d)
	}
}

func TestQuotaLeasesNoneShorterThanTwoRoundTrips(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	r := leasing("k", 100_000)
	r.Cost = 10
	f.allow(t, r)                                    // cold, and a round trip of 0
	f.clock.Advance(demandSpan(r.Quota.For))         // its demand has lasted a span: warm
	f.store.rtt.Store(int64(200 * time.Millisecond)) // 2 × 200ms > the lease's 250ms
	d := f.allow(t, r)[0]
	if d.Quota.Units == 0 {
		t.Fatalf("no grant: %+v", d)
	}
	if left := f.left("k"); left != 0 {
		t.Errorf("a lease shorter than two round trips is held (%d units)", left)
	}
	gbs := f.store.giveBacks()
	if len(gbs) != 1 || gbs[0].Units != d.Quota.Units {
		t.Errorf("give-backs %+v, want the %d units given back", gbs, d.Quota.Units)
	}
}

// A token_bucket key's leases last a slot at most: one of 10 ms is worth
// asking for at a round trip of 0 (a lease taken at its end needs three
// round trips, a sweep and the margins: 6 ms), not at one of 2 ms (12 ms).
// The key asks again once the round trip is short again.
func TestQuotaLeasesAskNoneTooShort(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	r := leasingAs(algorithms.TokenBucket)
	r.Limit.Window = 200 * time.Millisecond // a slot of 10 ms
	f.warm(t, r)                            // at a round trip of 0
	f.q.Forget(r.Key)
	f.store.rtt.Store(int64(2 * time.Millisecond))
	before := f.store.asking.Load()
	for range 500 {
		if d := f.allow(t, r)[0]; !d.Allowed {
			t.Fatalf("denied: %+v", d)
		}
	}
	if n := f.store.asking.Load() - before; n > 1 { // the first measures the round trip
		t.Errorf("%d calls asked for a lease of a 10 ms slot at a round trip of 2 ms", n)
	}
	f.store.rtt.Store(0)
	f.warm(t, r)
}

func TestQuotaLeasesSlowerIsTheDriftBoundRoundedDown(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 1000, 1001, 1002, 250 * time.Millisecond, algorithms.MaxQuotaLease, 24 * time.Hour} {
		if got, want := slower(d), d*1000/1001; got != want { // no overflow at these
			t.Errorf("slower(%v) = %v, want ⌊%v / 1.001⌋ = %v", d, got, d, want)
		}
	}
}
