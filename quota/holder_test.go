package quota

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/leasetwin"
)

// The tests' holder: a Leases over a counted memory store on a clock that
// moves only when told (leaseFixture), and the requests they send.

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

func (c *leaseClock) Now() time.Time { return c.base.Add(time.Duration(c.off.Load())) }

func (c *leaseClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// countedStore is a memory store on a test's clock (nil: the real one)
// that counts the calls reaching it (requests, with a cost; renewals, of
// cost 0; asking, either asking for a lease) and keeps the give-backs.
// On a test's clock each Allow takes rtt: half before the store decides,
// half after.
type countedStore struct {
	m                  *algorithms.MemoryStore
	clock              *leaseClock
	rtt                atomic.Int64
	requests, renewals atomic.Int64
	asking             atomic.Int64
	mu                 sync.Mutex
	givenBack          []algorithms.GiveBack
	during             func() // if set, runs in each Allow before the store decides
}

func newCountedStore(clock *leaseClock) *countedStore {
	return &countedStore{m: leasetwin.NewMemoryStore(), clock: clock}
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
	s.m.SettleAt(s.now(), ss)
	return nil
}

func (s *countedStore) GiveBack(_ context.Context, gbs []algorithms.GiveBack) error {
	s.mu.Lock()
	s.givenBack = append(s.givenBack, gbs...)
	s.mu.Unlock()
	s.m.GiveBackAt(s.now(), gbs)
	return nil
}

func (s *countedStore) SetOverride(_ context.Context, key string, o algorithms.Override, ttl time.Duration) error {
	return s.m.SetOverrideAt(s.now(), key, o, ttl)
}

func (s *countedStore) ClearOverride(_ context.Context, key string) error {
	s.m.ClearOverrideAt(s.now(), key)
	return nil
}

func (s *countedStore) giveBacks() []algorithms.GiveBack {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]algorithms.GiveBack(nil), s.givenBack...)
}

// used is what the store counts as taken of r's key.
func (s *countedStore) used(t *testing.T, r algorithms.Request) int64 {
	t.Helper()
	r.Quota = algorithms.QuotaAsk{}
	ds, _ := s.Peek(context.Background(), []algorithms.Request{r})
	return r.Limit.Capacity() - ds[0].Remaining
}

// leaseEvents adds up what a holder observes, by kind.
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

// leaseFixture is a holder over a counted memory store on a test
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
	f.q = NewLeasesOf(f.store, f.store, "test", f.events.observe, keys, f.clock.Now)
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

// warmBoth sends a and b, side by side, every millisecond until the store
// has granted each a lease: warmed one after the other, the first lease
// could end while the second warms.
func (f *leaseFixture) warmBoth(t *testing.T, a, b algorithms.Request) {
	t.Helper()
	var leasedA, leasedB bool
	for i := 0; i < 1000 && !(leasedA && leasedB); i++ {
		leasedA = leasedA || f.allow(t, a)[0].Quota.Units > 0
		leasedB = leasedB || f.allow(t, b)[0].Quota.Units > 0
		f.clock.Advance(time.Millisecond)
	}
	if !leasedA || !leasedB {
		t.Fatalf("no leases granted (%s %v, %s %v)", a.Key, leasedA, b.Key, leasedB)
	}
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

// TestQuotaLeasesDropDenials: once every zone of a request holds a lease,
// its denial cached meanwhile is dropped, so that a caller that looks the
// cache up first is answered from the leases; another request's stays.
func TestQuotaLeasesDropDenials(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	c := algorithms.NewDenyCache(leasetwin.NewMemoryStore())
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
