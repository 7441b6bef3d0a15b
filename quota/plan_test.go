package quota

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// TestUnleasedTakerCounted: an instance that decides a key in the store
// without a lease (the key is cold to it, but tracked: seen enough to
// count its demand) is a taker the store counts at another instance's
// grant, however long it keeps taking: the holder's answers then allow
// for it. (Sent unnamed, every such instance was one taker, "-", counted
// only for quota_lease after its first take.) A key it does not track is
// decided as without leases: no lease bookkeeping read, no taker
// recorded.
func TestUnleasedTakerCounted(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	other := NewLeasesOf(f.store, f.store, "other", nil, DefaultKeys, f.clock.Now)
	t.Cleanup(func() { _ = other.Close() })
	r := leasing("k", 100_000)
	f.warm(t, r)
	take := func() algorithms.Decision {
		t.Helper()
		reqs := []algorithms.Request{{Key: r.Key, Limit: r.Limit, Cost: 1, Quota: algorithms.QuotaAsk{For: r.Quota.For}}}
		ds, err := other.Allow(context.Background(), reqs)
		if err != nil || !ds[0].Allowed || ds[0].Leased {
			t.Fatalf("the other instance's request: %+v, %v; want admitted by the store", ds, err)
		}
		if reqs[0].Quota.For != r.Quota.For {
			t.Fatalf("the request's Quota.For is %v after the call, want %v as sent", reqs[0].Quota.For, r.Quota.For)
		}
		return ds[0]
	}
	if d := take(); d.Quota != (algorithms.QuotaGrant{}) {
		t.Fatalf("a key the other instance does not track: its decision reports lease bookkeeping %+v, want none", d.Quota)
	}
	for range quotaTrackUnits - 1 {
		take()
	}
	for range 3 { // past quota_lease, taking all along
		for range 3 {
			take()
			f.clock.Advance(testLeaseFor * 4 / 5) // 5/s: too few to lease
		}
		if d := f.warm(t, r)[0]; d.Leased || d.Quota.Takers != 2 {
			t.Fatalf("a grant counts %d takers of the key (leased %v), want 2 (this holder and the other)", d.Quota.Takers, d.Leased)
		}
	}
}

// TestFirstLeaseCountsTakersSoon: an instance that decided a key in the
// store before the key had lease bookkeeping left no record there, so a
// holder's first grant counts it out; that first lease is a
// firstLeaseShare of the ask, so the holder's next grant, which counts
// the other instance (taking in the store or leasing), comes before the
// holder has used it, and is the full ask. (With a full first lease, the holder's r allowed for no
// other taker for a whole lease: 301 over a tenth of the limit beside an
// instance taking as fast.)
func TestFirstLeaseCountsTakersSoon(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	other := NewLeasesOf(f.store, f.store, "other", nil, DefaultKeys, f.clock.Now)
	t.Cleanup(func() { _ = other.Close() })
	r := leasing("k", 100_000)
	take := func() {
		t.Helper()
		reqs := []algorithms.Request{{Key: r.Key, Limit: r.Limit, Cost: 1, Quota: algorithms.QuotaAsk{For: r.Quota.For}}}
		if ds, err := other.Allow(context.Background(), reqs); err != nil || !ds[0].Allowed {
			t.Fatalf("the other instance's request: %+v, %v; want admitted", ds, err)
		}
		other.calls.Wait()
	}
	for range quotaTrackUnits + 2 { // tracked by the other, before any bookkeeping
		take()
	}
	first := f.warm(t, r)[0]
	if first.Quota.Takers != 1 {
		t.Fatalf("the key's first grant counts %d takers, want 1 (the other left no record)", first.Quota.Takers)
	}
	latest := func() algorithms.QuotaGrant {
		sh := &f.q.shards[f.q.shardOf(r.Key)]
		sh.mu.Lock()
		defer sh.mu.Unlock()
		return sh.find(r.Key).latest.grant.Quota
	}
	for i := int64(0); latest().ID == first.Quota.ID; i++ {
		if i >= first.Quota.Units {
			t.Fatalf("the first lease (%d units) used up with no later grant", first.Quota.Units)
		}
		take()
		f.allow(t, r)
		f.clock.Advance(time.Millisecond)
	}
	if g := latest(); g.Takers != 2 || g.Units < 2*first.Quota.Units {
		t.Fatalf("the next grant: %d units counting %d takers, want 2 takers and the full ask (the first was %d units)", g.Units, g.Takers, first.Quota.Units)
	}
}
