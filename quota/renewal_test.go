package quota

import (
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

func TestQuotaLeasesRenewBeforeTheyRunOut(t *testing.T) {
	for _, alg := range []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindow, algorithms.SlidingLog, algorithms.TokenBucket} {
		t.Run(string(alg), func(t *testing.T) {
			f := newLeaseFixture(t, DefaultKeys)
			r := leasingAs(alg)
			f.warm(t, r)
			admitted := f.store.requests.Load() // every request so far went to the store, and was admitted
			before := f.store.requests.Load()
			for i := range 1500 { // six lease lives of steady demand, one request a millisecond
				f.clock.Advance(time.Millisecond)
				f.q.Sweep()
				d := f.allow(t, r)[0]
				if !d.Leased {
					t.Fatalf("request %d: not leased (%+v): a renewal came too late", i, d)
				}
				admitted++
			}
			if calls := f.store.requests.Load() - before; calls != 0 {
				t.Errorf("%d requests went to the store", calls)
			}
			if f.store.renewals.Load() == 0 {
				t.Error("no renewal")
			}
			if used := f.store.used(t, r); used < admitted {
				t.Errorf("the store counts %d, fewer than the %d admitted", used, admitted)
			}
			if err := f.q.Close(); err != nil {
				t.Fatal(err)
			}
			used := f.store.used(t, r)
			if alg == algorithms.TokenBucket { // it takes back only the units of the key's latest grant
				if used < admitted {
					t.Errorf("after Close the store counts %d, fewer than the %d admitted", used, admitted)
				}
			} else if used != admitted {
				t.Errorf("after Close the store counts %d, want the %d admitted (every unused unit given back)", used, admitted)
			}
		})
	}
}

// A lease the store ends early, at its window's or slot's end, is not
// renewed again and again as that end nears: a renewal granted before it
// would end there too. (A sliding_window key renewed on every request in
// the last eighth of each slot, holding up to 20 leases at once and using
// a third of what it was granted.)
func TestQuotaLeasesNoRenewalsAtSlotEnd(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	r := leasingAs(algorithms.SlidingWindow)
	r.Limit.Window = 10 * time.Second // slots of 500 ms: four ends in the run
	f.warm(t, r)
	before := f.store.renewals.Load()
	for range 2000 { // a request a millisecond for 2 s
		f.clock.Advance(time.Millisecond)
		f.allow(t, r)
	}
	if renewals := f.store.renewals.Load() - before; renewals > 20 { // one a lease (250 ms less its horizon), one more a slot
		t.Errorf("%d renewals in 2 s of 1 request/ms, want at most 20", renewals)
	}
}

// Under a steady demand, a key's leases are used: a renewal asks only what
// the units left lack (they are used first), so nearly all that is
// granted is used. (Sized for a whole life, each renewal left an eighth
// of its lease unused.)
func TestQuotaLeasesUsedUnderSteadyDemand(t *testing.T) {
	for _, alg := range []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindow, algorithms.SlidingLog, algorithms.TokenBucket} {
		t.Run(string(alg), func(t *testing.T) {
			f := newLeaseFixture(t, DefaultKeys)
			r := leasingAs(alg)
			f.warm(t, r)
			used, granted := f.events.get(LeaseUsed), f.events.get(LeaseGranted)
			for range 4000 { // a request a millisecond for 4 s
				f.clock.Advance(time.Millisecond)
				f.allow(t, r)
			}
			used, granted = f.events.get(LeaseUsed)-used, f.events.get(LeaseGranted)-granted
			if used < 3900 {
				t.Errorf("%d of 4000 requests admitted from leases, want nearly all", used)
			}
			if used*100 < 90*granted {
				t.Errorf("%d units used of %d granted, want at least 90%%", used, granted)
			}
		})
	}
}
