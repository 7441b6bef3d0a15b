package quota

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

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
