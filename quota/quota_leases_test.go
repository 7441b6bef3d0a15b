package quota

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// leaseClock is a test's clock: it moves only when told.
type leaseClock struct {
	base time.Time
	off  atomic.Int64
}

// newLeaseClock starts a second into a window of window, so that a test's
// requests fall in one fixed window.
func newLeaseClock(window time.Duration) *leaseClock {
	now := time.Now()
	return &leaseClock{base: now.Add(window - time.Duration(now.UnixNano()%int64(window)) + time.Second)}
}

func (c *leaseClock) Now() time.Time          { return c.base.Add(time.Duration(c.off.Load())) }
func (c *leaseClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// countedStore is a memory store on a test's clock (nil: the real one)
// that counts the calls reaching it (requests, with a cost; renewals, of
// cost 0; asking, either asking for a lease) and keeps the settlements.
// On a test's clock each Allow takes rtt: half before the store decides,
// half after.
type countedStore struct {
	m                  *algorithms.MemoryStore
	clock              *leaseClock
	rtt                atomic.Int64
	requests, renewals atomic.Int64
	asking             atomic.Int64
	mu                 sync.Mutex
	settled            []algorithms.Settlement
	during             func() // if set, runs in each Allow before the store decides
}

func newCountedStore(clock *leaseClock) *countedStore {
	return &countedStore{m: algorithms.NewMemoryStore(), clock: clock}
}

func (s *countedStore) Allow(_ context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	if reqs[0].Cost > 0 {
		s.requests.Add(1)
	} else {
		s.renewals.Add(1)
	}
	if reqs[0].Quota.Units > 0 {
		s.asking.Add(1)
	}
	if s.during != nil {
		s.during()
	}
	if s.clock == nil {
		return s.m.AllowAt(time.Now(), reqs), nil
	}
	rtt := time.Duration(s.rtt.Load())
	s.clock.Advance(rtt / 2)
	ds := s.m.AllowAt(s.clock.Now(), reqs)
	s.clock.Advance(rtt - rtt/2)
	return ds, nil
}

func (s *countedStore) now() time.Time {
	if s.clock == nil {
		return time.Now()
	}
	return s.clock.Now()
}

func (s *countedStore) Peek(_ context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	return s.m.PeekAt(s.now(), reqs), nil
}

func (s *countedStore) Reset(_ context.Context, key string) error {
	s.m.ResetAt(s.now(), key)
	return nil
}

func (s *countedStore) Settle(_ context.Context, ss []algorithms.Settlement) error {
	s.mu.Lock()
	s.settled = append(s.settled, ss...)
	s.mu.Unlock()
	s.m.SettleAt(s.now(), ss)
	return nil
}

func (s *countedStore) SetOverride(_ context.Context, key string, o algorithms.Override, ttl time.Duration) error {
	return s.m.SetOverrideAt(s.now(), key, o, ttl)
}

func (s *countedStore) ClearOverride(_ context.Context, key string) error {
	s.m.ClearOverrideAt(s.now(), key)
	return nil
}

func (s *countedStore) settlements() []algorithms.Settlement {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]algorithms.Settlement(nil), s.settled...)
}

// used is what the store counts as taken of r's key.
func (s *countedStore) used(t *testing.T, r algorithms.Request) int64 {
	t.Helper()
	r.Quota = algorithms.QuotaAsk{}
	ds, _ := s.Peek(context.Background(), []algorithms.Request{r})
	return r.Limit.Capacity() - ds[0].Remaining
}

// leaseEvents adds up what a Leases observes, by kind.
type leaseEvents struct {
	mu    sync.Mutex
	units map[LeaseEvent]int64
}

func (e *leaseEvents) observe(_ string, kind LeaseEvent, units int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.units == nil {
		e.units = make(map[LeaseEvent]int64)
	}
	e.units[kind] += units
}

func (e *leaseEvents) get(kind LeaseEvent) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.units[kind]
}

const (
	testLeaseWindow = time.Hour
	testLeaseFor    = 250 * time.Millisecond
)

// leasing is a request of cost 1 for key under events per hour, leasing
// for testLeaseFor.
func leasing(key string, events int64) algorithms.Request {
	return algorithms.Request{Key: key, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: events, Window: testLeaseWindow}, Cost: 1,
		Quota: algorithms.QuotaAsk{For: testLeaseFor}}
}

// leaseFixture is a Leases over a counted memory store on a test
// clock.
type leaseFixture struct {
	clock  *leaseClock
	store  *countedStore
	q      *Leases
	events *leaseEvents
}

func newLeaseFixture(t *testing.T, keys int) *leaseFixture {
	t.Helper()
	f := &leaseFixture{clock: newLeaseClock(testLeaseWindow), events: &leaseEvents{}}
	f.store = newCountedStore(f.clock)
	f.q = NewLeasesOf(f.store, "test", f.events.observe, keys, f.clock.Now)
	t.Cleanup(func() { _ = f.q.Close() })
	return f
}

// allow sends reqs, then waits for the background calls it started.
func (f *leaseFixture) allow(t *testing.T, reqs ...algorithms.Request) []algorithms.Decision {
	t.Helper()
	ds, err := f.q.Allow(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	f.q.calls.Wait()
	return ds
}

// warm sends reqs every millisecond until the store grants a lease for
// them, and returns the granting decisions.
func (f *leaseFixture) warm(t *testing.T, reqs ...algorithms.Request) []algorithms.Decision {
	t.Helper()
	for range 1000 {
		ds := f.allow(t, reqs...)
		if ds[0].Quota.Units > 0 {
			return ds
		}
		f.clock.Advance(time.Millisecond)
	}
	t.Fatalf("no lease granted for %s in 1000 requests", reqs[0].Key)
	return nil
}

// left is the units not yet used of key's live leases.
func (f *leaseFixture) left(key string) int64 { return f.leftOf(leasing(key, 100_000)) }

// leftOf is the units not yet used of the live leases of r's key under
// r's limit.
func (f *leaseFixture) leftOf(r algorithms.Request) int64 {
	key := r.Key
	sh := &f.q.shards[f.q.shardOf(key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.find(key)
	if k == nil {
		return 0
	}
	left, _ := k.standing(f.clock.Now(), &r)
	return left
}

func TestQuotaLeasesAdmitWithoutTheStore(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	r := leasing("k", 100_000)
	grant := f.warm(t, r)[0]
	leased := 0
	for range 20 {
		f.clock.Advance(time.Millisecond)
		before := f.store.requests.Load()
		d := f.allow(t, r)[0]
		if !d.Allowed {
			t.Fatalf("denied: %+v", d)
		}
		calls := f.store.requests.Load() - before
		if d.Leased {
			leased++
			if calls != 0 {
				t.Fatalf("a leased admission made %d store calls", calls)
			}
			if want := r.Limit.Events - f.store.used(t, r) + f.left("k"); d.Remaining != want {
				t.Errorf("leased decision's Remaining %d, want %d (the store's, and the units leased not yet used)", d.Remaining, want)
			}
			if d.At <= grant.At || d.Quota.Units == 0 || d.ResetAfter >= grant.ResetAfter {
				t.Errorf("leased decision %+v: want At after the grant's %d, its grant, ResetAfter counted down from the grant's", d, grant.At)
			}
		} else if calls != 1 {
			t.Fatalf("a store admission made %d store calls", calls)
		}
	}
	if leased == 0 {
		t.Fatal("no request was admitted from a lease")
	}
	if got := f.events.get(LeaseUsed); got != int64(leased) {
		t.Errorf("observed %d units used, want %d", got, leased)
	}
}

// Take decides from held leases alone: a request every zone of which
// holds one is admitted with no store call, as Allow admits it; any other
// gets nil, with no call, no unit taken and no demand recorded (Allow,
// which decides it next, records it once).
func TestQuotaLeasesTake(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	ip1, ip2, static := leasing("ip1", 100_000), leasing("ip2", 100_000), leasing("static", 100_000)
	f.warm(t, ip1, static)
	demand := func(key string) int64 {
		sh := &f.q.shards[f.q.shardOf(key)]
		sh.mu.Lock()
		defer sh.mu.Unlock()
		return sh.find(key).demand.cur
	}
	before, left, was, used := f.store.requests.Load(), f.left("static"), demand("static"), f.events.get(LeaseUsed)
	if ds := f.q.Take([]algorithms.Request{static, ip2}); ds != nil { // static's lease is taken from first; ip2 holds none
		t.Fatalf("Take decided a request with a zone without a lease: %+v", ds)
	}
	if got := f.store.requests.Load(); got != before {
		t.Errorf("Take made %d store calls", got-before)
	}
	if got := f.left("static"); got != left {
		t.Errorf("static's lease has %d left after Take declined, want %d", got, left)
	}
	if got := demand("static"); got != was {
		t.Errorf("static's demand %d after Take declined, want %d: Allow would count the request twice", got, was)
	}
	ds := f.q.Take([]algorithms.Request{ip1, static})
	f.q.calls.Wait()
	if len(ds) != 2 || !ds[0].Leased || !ds[1].Leased || !ds[0].Allowed || !ds[1].Allowed {
		t.Fatalf("Take with leases in every zone: %+v, want both admitted from them", ds)
	}
	if got := f.store.requests.Load(); got != before { // a renewal it started is no request
		t.Errorf("a leased Take made %d store requests", got-before)
	}
	if got := demand("static"); got != was+1 {
		t.Errorf("static's demand %d after a leased admission, want %d", got, was+1)
	}
	if got := f.events.get(LeaseUsed) - used; got != 2 {
		t.Errorf("observed %d units used, want 2", got)
	}
}

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

// leasingAs is leasing("k", …) of algorithm alg, with a limit the test's
// requests stay within, and for a token bucket one that refills nothing
// while the test runs (so that the store's count is what was taken).
func leasingAs(alg algorithms.Algorithm) algorithms.Request {
	r := leasing("k", 100_000)
	r.Limit.Algorithm = alg
	switch alg {
	case algorithms.SlidingLog:
		r.Limit.Events = algorithms.MaxLogEvents
	case algorithms.TokenBucket:
		r.Limit.Events, r.Limit.Burst = 1, 100_000
	}
	return r
}

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
			ss := f.store.settlements()
			if len(ss) != 1 || ss[0].Delta != -unused || ss[0].Quota.Units == 0 || ss[0].QuotaFor != testLeaseFor {
				t.Fatalf("settlements %+v, want one giving back %d units of the grant", ss, unused)
			}
			if got := f.events.get(LeaseReturned); got != unused {
				t.Errorf("observed %d returned, want %d", got, unused)
			}
			if used := f.store.used(t, r); used != admitted {
				t.Errorf("the store counts %d, want the %d admitted", used, admitted)
			}
			f.q.Sweep()
			f.q.calls.Wait()
			if n := len(f.store.settlements()); n != 1 {
				t.Errorf("%d settlements: a lease was given back twice", n)
			}
		})
	}
}

// On the real clock, leases left unused end by themselves, and their
// units go back.
func TestQuotaLeasesEndInTheBackground(t *testing.T) {
	store := newCountedStore(nil)
	q := NewLeases(store, "test", nil)
	defer q.Close()
	r := leasing("k", 100_000)
	r.Limit.Window = algorithms.MaxWindow // one window whenever the test runs
	admitted := int64(0)
	warm := time.Now().Add(10 * time.Second) // a key leases once its demand has lasted a span (500ms)
	for q.held.Load() == 0 {
		if time.Now().After(warm) {
			t.Fatal("no lease granted")
		}
		if ds, _ := q.Allow(context.Background(), []algorithms.Request{r}); ds[0].Allowed {
			admitted++
		}
		time.Sleep(time.Millisecond) // a steady stream, not a burst: a burst spends the limit before it warms
	}
	deadline := time.Now().Add(10 * time.Second)
	for q.held.Load() > 0 || store.used(t, r) != admitted {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s, %d leases held, and the store counts %d of %d admitted", q.held.Load(), store.used(t, r), admitted)
		}
		time.Sleep(time.Millisecond) // the sweep's own timer, which the test cannot wait on otherwise
	}
	if len(store.settlements()) == 0 {
		t.Error("no give-back")
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
			if ss := f.store.settlements(); len(ss) != 0 {
				t.Errorf("settlements %+v, want none", ss)
			}
			if got := f.events.get(LeaseExpired); got != unused {
				t.Errorf("observed %d expired, want %d", got, unused)
			}
		})
	}
}

func TestQuotaLeasesCloseGivesBackEverything(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	a, b := leasing("a", 100_000), leasing("b", 100_000)
	var leasedA, leasedB bool // side by side: the first lease must not end while the second warms
	for i := 0; i < 1000 && !(leasedA && leasedB); i++ {
		leasedA = leasedA || f.allow(t, a)[0].Quota.Units > 0
		leasedB = leasedB || f.allow(t, b)[0].Quota.Units > 0
		f.clock.Advance(time.Millisecond)
	}
	if !leasedA || !leasedB {
		t.Fatalf("no leases granted (a %v, b %v)", leasedA, leasedB)
	}
	admittedA, admittedB := f.store.used(t, a)-f.left("a"), f.store.used(t, b)-f.left("b")
	if err := f.q.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := len(f.store.settlements()), 2; got != want {
		t.Errorf("%d give-backs, want %d", got, want)
	}
	if got := f.store.used(t, a); got != admittedA {
		t.Errorf("a: the store counts %d, want %d", got, admittedA)
	}
	if got := f.store.used(t, b); got != admittedB {
		t.Errorf("b: the store counts %d, want %d", got, admittedB)
	}
	before := f.store.requests.Load()
	if d := f.allow(t, a)[0]; d.Leased || f.store.requests.Load() != before+1 {
		t.Errorf("after Close: leased %v, store calls %d, want the store's decision", d.Leased, f.store.requests.Load()-before)
	}
}

// GiveBack (a zone's config unloaded) gives back the leases of the keys
// with its prefix, once, and keeps the others'.
func TestQuotaLeasesGiveBackByPrefix(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	a, b := leasing("api:{a}", 100_000), leasing("api2:{b}", 100_000)
	var leasedA, leasedB bool // side by side: the first lease must not end while the second warms
	for i := 0; i < 1000 && !(leasedA && leasedB); i++ {
		leasedA = leasedA || f.allow(t, a)[0].Quota.Units > 0
		leasedB = leasedB || f.allow(t, b)[0].Quota.Units > 0
		f.clock.Advance(time.Millisecond)
	}
	if !leasedA || !leasedB {
		t.Fatalf("no leases granted (a %v, b %v)", leasedA, leasedB)
	}
	admittedA, usedB := f.store.used(t, a)-f.left(a.Key), f.store.used(t, b)
	f.q.GiveBack("api:{")
	f.q.calls.Wait()
	if got := len(f.store.settlements()); got != 1 {
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
	if got := len(f.store.settlements()); got != 1 {
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
	if n := len(f.store.settlements()); n != 0 {
		t.Errorf("Forget gave back (%d settlements)", n)
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

func TestQuotaLeasesResetAndOverrideDropLeases(t *testing.T) {
	for name, change := range map[string]func(q *Leases) error{
		"reset": func(q *Leases) error { return q.Reset(context.Background(), "k") },
		"override": func(q *Leases) error {
			return q.SetOverride(context.Background(), "k", algorithms.Override{Events: 50}, 0)
		},
		"clear override": func(q *Leases) error { return q.ClearOverride(context.Background(), "k") },
	} {
		t.Run(name, func(t *testing.T) {
			f := newLeaseFixture(t, DefaultKeys)
			r := leasing("k", 100_000)
			f.warm(t, r)
			if err := change(f.q); err != nil {
				t.Fatal(err)
			}
			if f.left("k") != 0 {
				t.Error("leases held after the change")
			}
			before := f.store.requests.Load()
			if d := f.allow(t, r)[0]; d.Leased || f.store.requests.Load() != before+1 {
				t.Error("a request was admitted from a lease of before the change")
			}
		})
	}
}

func TestQuotaLeasesServeOnlyTheirLimit(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	f.warm(t, leasing("k", 100_000))
	left := f.left("k")
	before := f.store.requests.Load()
	if d := f.allow(t, leasing("k", 50_000))[0]; d.Leased || f.store.requests.Load() != before+1 {
		t.Error("a request of another limit was admitted from the lease")
	}
	if got := f.left("k"); got != left {
		t.Errorf("units left %d, want %d: a request of another limit took some", got, left)
	}
}

func TestQuotaLeasesAllOrNothing(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	ip1, ip2, static := leasing("ip1", 100_000), leasing("ip2", 100_000), leasing("static", 100_000)
	ds := f.warm(t, ip1, static)
	if ds[1].Quota.Units == 0 {
		t.Fatalf("a grant for one zone only: %+v", ds)
	}
	left := f.left("static")
	before := f.store.requests.Load()
	ds = f.allow(t, ip2, static) // ip2 holds no lease
	if ds[0].Leased || ds[1].Leased || f.store.requests.Load() != before+1 {
		t.Errorf("a request with a zone without a lease was decided in process: %+v", ds)
	}
	if got := f.left("static"); got != left {
		t.Errorf("static's lease has %d left, want %d: a request not admitted from it took units", got, left)
	}
	before = f.store.requests.Load()
	ds = f.allow(t, ip1, static)
	if !ds[0].Leased || !ds[1].Leased || f.store.requests.Load() != before {
		t.Errorf("a request with leases in every zone was not decided in process: %+v", ds)
	}
	big := ip1
	big.Cost = f.left("ip1") + 1
	static.Cost = 1
	before = f.store.requests.Load()
	leftStatic := f.left("static")
	if ds = f.allow(t, static, big); ds[0].Leased || f.store.requests.Load() != before+1 { // static's lease could serve, big's cannot
		t.Errorf("a cost above one zone's lease was decided in process: %+v", ds)
	}
	if got, want := f.left("static"), leftStatic+ds[0].Quota.Units; got != want { // its lease, and the new grant
		t.Errorf("static's leases have %d left, want %d", got, want)
	}
}

// Many goroutines on two instances, each with its own Leases on the
// real clock over one store, a per-goroutine zone beside a shared one:
// the shared zone never admits more than its limit, and the store never
// counts fewer than were admitted.
func TestQuotaLeasesNeverOver(t *testing.T) {
	const limit, workers, each = 3000, 8, 1000
	m := algorithms.NewMemoryStore()
	static := algorithms.Request{Key: "static", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: limit, Window: algorithms.MaxWindow}, Cost: 1,
		Quota: algorithms.QuotaAsk{For: 20 * time.Millisecond}}
	var admitted, leased atomic.Int64
	var wg sync.WaitGroup
	for inst := range 2 {
		q := NewLeases(m, fmt.Sprint("instance", inst), nil)
		defer q.Close()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ip := static
				ip.Key = fmt.Sprintf("ip%d-%d", inst, w)
				ip.Limit.Events = 1_000_000
				for range each {
					ds, err := q.Allow(context.Background(), []algorithms.Request{ip, static})
					if err != nil {
						t.Error(err)
						return
					}
					if algorithms.Admitted([]algorithms.Request{ip, static}, ds) {
						admitted.Add(1)
						if ds[1].Leased {
							leased.Add(1)
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	if admitted.Load() > limit {
		t.Fatalf("admitted %d, over the limit of %d", admitted.Load(), limit)
	}
	ds, _ := m.Peek(context.Background(), []algorithms.Request{{Key: static.Key, Limit: static.Limit, Cost: 1}})
	if used := limit - ds[0].Remaining; used < admitted.Load() || used > limit {
		t.Errorf("the store counts %d: fewer than the %d admitted, or over the limit", used, admitted.Load())
	}
	t.Logf("admitted %d of %d (%d leased)", admitted.Load(), 2*workers*each, leased.Load())
}

func TestQuotaLeasesSlowerIsTheDriftBoundRoundedDown(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 1000, 1001, 1002, 250 * time.Millisecond, algorithms.MaxQuotaLease, 24 * time.Hour} {
		if got, want := slower(d), d*1000/1001; got != want { // no overflow at these
			t.Errorf("slower(%v) = %v, want ⌊%v / 1.001⌋ = %v", d, got, d, want)
		}
	}
}

// TestQuotaLeasesDropDenials: once every zone of a request holds a lease,
// its denial cached meanwhile is dropped, so that a caller that looks the
// cache up first is answered from the leases; another request's stays.
func TestQuotaLeasesDropDenials(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	c := algorithms.NewDenyCache(algorithms.NewMemoryStore())
	f.q.DropsDenials(c)
	r, other := leasing("k", 100_000), leasing("other", 100_000)
	for _, req := range []algorithms.Request{r, other} {
		c.RememberAt(f.clock.Now(), []algorithms.Request{req}, []algorithms.Decision{{RetryAfter: time.Hour}})
	}
	f.warm(t, r)
	if ds := c.CachedAt(f.clock.Now(), []algorithms.Request{r}); ds != nil {
		t.Errorf("k's denial still cached once its lease is held: %+v", ds)
	}
	if ds := c.CachedAt(f.clock.Now(), []algorithms.Request{other}); ds == nil {
		t.Error("another key's denial was dropped too")
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
