package quota

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// lateStore holds the answer to its next call, once armed, until a later
// call has been answered: the earlier decision's grant is installed last.
type lateStore struct {
	*countedStore
	armed            atomic.Bool
	decided, release chan struct{}
}

func (s *lateStore) Allow(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	if !s.armed.CompareAndSwap(true, false) {
		return s.countedStore.Allow(ctx, reqs)
	}
	ds, err := s.countedStore.Allow(ctx, reqs)
	close(s.decided)
	<-s.release
	return ds, err
}

// The request whose call is granted leases reports r as a decision taken
// from them would: the store's remaining at the key's latest grant plus
// the units leased not yet used, whatever order two grants' answers came
// back in (the earlier one's remaining counts the later one's units in
// both). When one zone's lease went back, the leases held cannot admit
// the request: r stays the store's.
func TestQuotaLeasesGrantAnswersAsItsLeases(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	r := leasing("k", 100_000)
	if d, want := f.warm(t, r)[0], r.Limit.Events-f.store.used(t, r)+f.left(r.Key); d.Remaining != want {
		t.Errorf("the granting decision's Remaining %d, want %d (the store's and the units leased)", d.Remaining, want)
	}

	// (a sliding window: a fixed window's answers also never rise on one
	// instance, steady, which would hide the rule)
	r = leasingAs(algorithms.SlidingWindow)
	for _, rtt := range []time.Duration{0, 2 * time.Millisecond} { // 0: both grants in one µs of the store's clock
		f := newLeaseFixture(t, DefaultKeys)
		f.store.rtt.Store(int64(rtt))
		late := &lateStore{countedStore: f.store, decided: make(chan struct{}), release: make(chan struct{})}
		_ = f.q.Close()
		f.q = NewLeasesOf(late, late, "late", nil, DefaultKeys, f.clock.Now) // closed by f's cleanup
		f.warm(t, r)
		f.clock.Advance(testLeaseFor) // the leases end; their demand stays
		f.q.Sweep()
		f.q.calls.Wait()
		late.armed.Store(true)
		var first []algorithms.Decision
		done := make(chan struct{})
		go func() {
			defer close(done)
			first, _ = f.q.Allow(context.Background(), []algorithms.Request{r})
		}()
		<-late.decided
		second := f.allow(t, r)
		close(late.release)
		<-done
		f.q.calls.Wait()
		if first[0].Quota.Units == 0 || second[0].Quota.Units == 0 {
			t.Fatalf("round trip %v: want both calls granted: %+v, %+v", rtt, first[0].Quota, second[0].Quota)
		}
		want := r.Limit.Events - f.store.used(t, r) + f.leftOf(r)
		if first[0].Remaining != want {
			t.Errorf("round trip %v: the grant decided first, installed last, reports Remaining %d, want %d", rtt, first[0].Remaining, want)
		}
	}

	r = leasing("k", 100_000)
	f = newLeaseFixture(t, DefaultKeys) // a key's requests under two limits: the store decides with the smaller
	smaller := leasing(r.Key, 90_000)
	f.warm(t, r)
	f.warm(t, smaller)
	d := f.allow(t, r)[0]
	look := r
	look.Quota.Units = 0
	peek, _ := f.store.Peek(context.Background(), []algorithms.Request{look})
	if want := peek[0].Remaining + f.leftOf(r); !d.Leased || d.Remaining != want {
		t.Errorf("beside a later grant under a smaller limit: leased %v, Remaining %d, want %d (the store's and r's units leased)", d.Leased, d.Remaining, want)
	}

	f = newLeaseFixture(t, DefaultKeys)
	j := leasing("j", 100_000)
	for i := 0; f.q.shardOf(j.Key) == f.q.shardOf(r.Key); i++ {
		j.Key = fmt.Sprint("j", i)
	}
	f.store.during = func() { f.q.Forget(j.Key) } // j's grant goes back, k's is held
	ds := f.warm(t, r, j)
	if f.left(r.Key) == 0 || f.left(j.Key) != 0 {
		t.Fatalf("want k's lease held, j's gone back: left %d, %d", f.left(r.Key), f.left(j.Key))
	}
	if want := r.Limit.Events - f.store.used(t, r); ds[0].Remaining != want {
		t.Errorf("k's Remaining %d beside a lease gone back, want the store's %d", ds[0].Remaining, want)
	}
}

// TestLeasedRemaining: a leased answer's r is the store's remaining at
// the key's latest grant plus the units this instance leased and has not
// used; with other takers it allows for what they take meanwhile: as
// much as this instance took since the grant per other taker, and a
// tenth of the capacity, or all of the store's remaining when less is
// left (the truth may then be as low as the instance's own units).
func TestLeasedRemaining(t *testing.T) {
	for _, tt := range []struct {
		name                                   string
		store, unused, taken, takers, capacity int64
		want                                   int64
	}{
		{"alone: the store's word and the units held", 500, 40, 0, 1, 1000, 540},
		{"alone, taking: the units held say it", 500, 40, 60, 1, 1000, 540},
		{"alone, no bookkeeping counted", 500, 40, 0, 0, 1000, 540},
		{"with others: a tenth less", 500, 40, 0, 2, 1000, 440},
		{"with another, taking: what this one took less too", 500, 40, 60, 2, 1000, 380},
		{"with two others, taking: twice that", 500, 40, 60, 3, 1000, 320},
		{"with others, under a tenth left: only the units held", 60, 40, 0, 3, 1000, 40},
		{"with others, taken more than is left: only the units held", 300, 40, 250, 2, 1000, 40},
		{"with others, nothing left in the store", 0, 40, 0, 2, 1000, 40},
		{"a debt stays a debt", -5, 40, 0, 2, 1000, 35},
		{"capacity under 10: nothing to allow", 5, 2, 0, 2, 9, 7},
	} {
		if got := leasedRemaining(tt.store, tt.unused, tt.taken, tt.takers, tt.capacity); got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestLeasedRemainingReadsTheLatestGrant: a leased answer's r starts from
// the key's latest grant, whichever lease serves it: the latest by the
// store's clock, then by grant number in one microsecond, and under the
// limit that grant was made with (an override's capacity sizes the
// allowance for other takers).
func TestLeasedRemainingReadsTheLatestGrant(t *testing.T) {
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1000, Window: time.Minute}
	lease := func(at, id, remaining, takers int64, o algorithms.Override) *quotaLease {
		return &quotaLease{req: algorithms.Request{Limit: limit}, grant: algorithms.Decision{
			At: at, Remaining: remaining, Override: o, Quota: algorithms.QuotaGrant{ID: id, Takers: takers}}}
	}
	serving := lease(1_000, 4, 500, 1, algorithms.Override{})
	for _, tt := range []struct {
		name   string
		latest *quotaLease // the key's latest grant held (nil: none)
		taken  int64
		want   int64
	}{
		{"no other grant: the serving lease's word", nil, 0, 500 + 40},
		{"the serving lease is the latest", serving, 0, 500 + 40},
		{"a later grant: its word", lease(2_000, 5, 300, 1, algorithms.Override{}), 0, 300 + 40},
		{"an earlier grant, answered late: the serving lease's word", lease(900, 3, 700, 1, algorithms.Override{}), 0, 500 + 40},
		{"one microsecond, a higher grant number: the later grant", lease(1_000, 5, 200, 1, algorithms.Override{}), 0, 200 + 40},
		{"one microsecond, a lower grant number: the serving lease", lease(1_000, 3, 200, 1, algorithms.Override{}), 0, 500 + 40},
		{"with others, under the latest grant's override: a tenth of its capacity", lease(2_000, 5, 300, 2, algorithms.Override{Events: 100}), 20, 300 - (100/10 + 20) + 40},
	} {
		k := quotaKey{latest: tt.latest, taken: tt.taken}
		if got := k.remaining(serving, 40); got != tt.want {
			t.Errorf("%s: got r %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestSteadyRemaining: within one fixed window an instance's answers for
// a key never rise (a give-back or a later grant's word may raise the
// estimate); a new window, or another algorithm, starts over.
func TestSteadyRemaining(t *testing.T) {
	fixed := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 100, Window: time.Minute}
	at := func(at, reset int64, r int64) algorithms.Decision {
		return algorithms.Decision{At: at, ResetAfter: time.Duration(reset) * time.Microsecond, Remaining: r}
	}
	var k quotaKey
	steps := []struct {
		d    algorithms.Decision
		l    algorithms.Limit
		want int64
	}{
		{at(1_000, 59_000_000, 80), fixed, 80},
		{at(2_000, 58_999_000, 90), fixed, 80},        // a give-back raised the store's word: held
		{at(3_000, 58_997_999, 70), fixed, 70},        // a leased answer's times rounded: the same window
		{at(60_000_000, 60_000_000, 100), fixed, 100}, // the next window
		{at(59_000_000, 1_000_000, 5), fixed, 5},      // an earlier window's answer, late: its own
		{at(60_000_001, 59_999_999, 99), fixed, 99},
		{at(60_000_002, 59_999_998, 100), algorithms.Limit{Algorithm: algorithms.SlidingWindow}, 100},
	}
	for i, s := range steps {
		if got := k.steady(s.d, s.l).Remaining; got != s.want {
			t.Errorf("step %d: got r %d, want %d", i, got, s.want)
		}
	}
}
