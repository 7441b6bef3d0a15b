package quota

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

func TestQuotaLeasesGiveBackAtTheirEnd(t *testing.T) {
	for _, alg := range []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindow, algorithms.SlidingLog, algorithms.TokenBucket} {
		t.Run(string(alg), func(t *testing.T) {
			f := newLeaseFixture(t, DefaultKeys)
			r := leasingAs(alg)
			f.warm(t, r)
			admitted := f.store.requests.Load()
			unused := f.leftOf(r)
			if unused == 0 {
				t.Fatal("no units left in the lease")
			}
			sh := &f.q.shards[f.q.shardOf("k")]
			sh.mu.Lock()
			end := sh.find("k").leases[0].end
			sh.mu.Unlock()
			f.clock.Advance(end.Sub(f.clock.Now())) // at its end: a token bucket takes units back only before its end on the store's clock
			f.q.Sweep()
			f.q.calls.Wait()
			gbs := f.store.giveBacks()
			if len(gbs) != 1 || gbs[0].Units != unused || gbs[0].Grant.Units == 0 || gbs[0].LeaseFor != testLeaseFor {
				t.Fatalf("give-backs %+v, want one giving back %d units of the grant", gbs, unused)
			}
			if got := f.events.get(LeaseReturned); got != unused {
				t.Errorf("observed %d returned, want %d", got, unused)
			}
			if used := f.store.used(t, r); used != admitted {
				t.Errorf("the store counts %d, want the %d admitted", used, admitted)
			}
			f.q.Sweep()
			f.q.calls.Wait()
			if n := len(f.store.giveBacks()); n != 1 {
				t.Errorf("%d give-backs: a lease was given back twice", n)
			}
		})
	}
}

// A lease found ended when the store would surely refuse its give-back
// (a quiet key, swept late) sends none: its units expire.
func TestQuotaLeasesExpireWhenTooLateToGiveBack(t *testing.T) {
	for _, alg := range []algorithms.Algorithm{algorithms.FixedWindow, algorithms.TokenBucket} {
		t.Run(string(alg), func(t *testing.T) {
			f := newLeaseFixture(t, DefaultKeys)
			r := leasing("k", 100_000)
			r.Limit.Algorithm = alg
			d := f.warm(t, r)[0]
			unused := f.leftOf(r)
			late := time.Duration(d.Quota.End-d.At) * time.Microsecond // past the lease's end on the store's clock
			if alg != algorithms.TokenBucket {
				late += testLeaseFor + algorithms.QuotaGiveBackGrace // and past the time a give-back is taken
			}
			f.clock.Advance(late + late/1000 + time.Microsecond) // the store's clock may run 10⁻³ slower
			f.q.Sweep()
			f.q.calls.Wait()
			if gbs := f.store.giveBacks(); len(gbs) != 0 {
				t.Errorf("give-backs %+v, want none", gbs)
			}
			if got := f.events.get(LeaseExpired); got != unused {
				t.Errorf("observed %d expired, want %d", got, unused)
			}
		})
	}
}

// GiveBack (a zone's config unloaded) gives back the leases of the keys
// with its prefix, once, and keeps the others'.
func TestQuotaLeasesGiveBackByPrefix(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	a, b := leasing("api:{a}", 100_000), leasing("api2:{b}", 100_000)
	f.warmBoth(t, a, b)
	admittedA, usedB := f.store.used(t, a)-f.left(a.Key), f.store.used(t, b)
	f.q.GiveBack("api:{")
	f.q.calls.Wait()
	if got := len(f.store.giveBacks()); got != 1 {
		t.Errorf("%d give-backs, want 1", got)
	}
	if got := f.store.used(t, a); got != admittedA {
		t.Errorf("a: the store counts %d, want the %d admitted", got, admittedA)
	}
	if got := f.store.used(t, b); got != usedB || f.left(b.Key) == 0 {
		t.Errorf("b: the store counts %d (want %d), %d units left: want its leases kept", got, usedB, f.left(b.Key))
	}
	if ds := f.q.Take([]algorithms.Request{a}); ds != nil {
		t.Errorf("a decided from a lease given back: %+v", ds[0])
	}
	if ds := f.q.Take([]algorithms.Request{b}); ds == nil {
		t.Error("b not decided from its lease")
	}
	f.q.GiveBack("api:{")
	f.q.calls.Wait()
	if got := len(f.store.giveBacks()); got != 1 {
		t.Errorf("after a second GiveBack: %d give-backs, want still 1", got)
	}
}

// A grant in flight while GiveBack runs is not held: its units go back.
func TestQuotaLeasesGiveBackInFlight(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	r := leasing("api:{k}", 100_000)
	f.store.during = func() { f.q.GiveBack("api:{") }
	f.warm(t, r)
	f.store.during = nil
	if left := f.left(r.Key); left != 0 {
		t.Errorf("a grant in flight during GiveBack: %d units held, want none", left)
	}
	if got, want := f.store.used(t, r), f.store.requests.Load(); got != want {
		t.Errorf("the store counts %d, want the %d requests admitted (the grant given back)", got, want)
	}
}

func TestQuotaLeasesForgetDropsWithoutGivingBack(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	r := leasing("k", 100_000)
	f.warm(t, r)
	unused := f.left("k")
	f.q.Forget("k")
	f.q.calls.Wait()
	if n := len(f.store.giveBacks()); n != 0 {
		t.Errorf("Forget gave back (%d give-backs)", n)
	}
	if got := f.events.get(LeaseExpired); got != unused {
		t.Errorf("observed %d expired, want %d", got, unused)
	}
	before := f.store.requests.Load()
	if d := f.allow(t, r)[0]; d.Leased || f.store.requests.Load() != before+1 {
		t.Error("after Forget, a request was admitted from the dropped lease")
	}
}

// TestQuotaLeasesForgetInFlight: a Forget while a grant is in flight
// keeps the grant from being held when it is of the grant's key (its
// shard's), and spares it when it is another key's.
func TestQuotaLeasesForgetInFlight(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	other := "other"
	for i := 0; f.q.shardOf(other) == f.q.shardOf("k"); i++ {
		other = fmt.Sprint("other", i)
	}
	for _, tc := range []struct {
		forget string
		held   bool
	}{{"k", false}, {other, true}} {
		f.q.ForgetAll()
		f.store.during = func() { f.q.Forget(tc.forget) }
		f.warm(t, leasing("k", 100_000))
		f.store.during = nil
		if got := f.left("k") > 0; got != tc.held {
			t.Errorf("a grant in flight during a Forget of %q: held %v, want %v", tc.forget, got, tc.held)
		}
	}
}
