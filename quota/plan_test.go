package quota

import (
	"context"
	"sync"
	"sync/atomic"
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

// leaseEnded is a fixture whose key "k" was requested 1,000 times a
// second for 0.6 s (warm, a lease held), then every lease of it ended,
// the demand still counted: the next request asks the store; r is its
// request.
func leaseEnded(t *testing.T) (f *leaseFixture, r algorithms.Request) {
	t.Helper()
	f = newLeaseFixture(t, DefaultKeys)
	r = leasing("k", 1_000_000_000)
	for range 600 {
		f.allow(t, r)
		f.clock.Advance(time.Millisecond)
	}
	f.clock.Advance(leaseLife(&r))
	return f, r
}

// inFlight is the units the grants of key in flight asked
// (quotaKey.inFlight).
func (f *leaseFixture) inFlight(key string) int64 {
	sh := &f.q.shards[f.q.shardOf(key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.find(key).inFlight
}

// TestQuotaLeasesConcurrentAsksShareOneLease: requests of a hot key that
// reach the store together (an instance's connections, once its lease
// ran out) ask between them for what its demand uses in a lease's life,
// not each for all of it: a grant in flight counts as units the key
// holds (quotaKey.inFlight). Each asking for a whole lease, 16
// concurrent requests took 16 leases' worth out of the store, unused by
// the leases' end and counted as used until given back: three Caddy
// instances at three times a key's limit admitted 63–93% of what the
// algorithm allows (the lease-fleet bench).
func TestQuotaLeasesConcurrentAsksShareOneLease(t *testing.T) {
	f, r := leaseEnded(t)
	perLife := int64(leaseLife(&r) / time.Millisecond) // the demand's units in a lease's life
	if left := f.left("k"); left != 0 {
		t.Fatalf("%d units left after the leases' end", left)
	}
	const n = 16
	var arrived atomic.Int64
	gate := make(chan struct{})
	f.store.during = func() { // all n calls reach the store before any is answered
		if arrived.Add(1) == n {
			close(gate)
		}
		<-gate
	}
	before := f.events.get(LeaseGranted)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.q.Allow(context.Background(), []algorithms.Request{r}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	f.q.calls.Wait()
	f.store.during = nil
	granted := f.events.get(LeaseGranted) - before
	if most := perLife + 2*(n-1); granted > most {
		t.Errorf("%d concurrent requests were granted %d units, over the %d their demand uses in a lease's life and 2 for each other request",
			n, granted, most)
	}
	if granted < perLife/2 {
		t.Errorf("%d concurrent requests were granted %d units, under half the %d their demand uses in a lease's life", n, granted, perLife)
	}
	if n := f.inFlight("k"); n != 0 {
		t.Errorf("%d units still counted in flight once every grant was answered", n)
	}
}

// TestQuotaLeasesAskInFlightEndsOnPanic: a store call that panics takes
// its asks out of the units in flight, so the key's next asks are not
// cut to 2 units for good.
func TestQuotaLeasesAskInFlightEndsOnPanic(t *testing.T) {
	f, r := leaseEnded(t)
	f.store.during = func() { panic("the store panicked") }
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the store's panic did not reach the caller")
			}
		}()
		_, _ = f.q.Allow(context.Background(), []algorithms.Request{r})
	}()
	f.store.during = nil
	if n := f.inFlight("k"); n != 0 {
		t.Errorf("%d units still counted in flight after the store call panicked", n)
	}
}
