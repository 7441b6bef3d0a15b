// Package quota holds an instance's quota leases of a shared store: units
// of hot keys the store counted ahead for this instance (what a lease is,
// and what the store keeps of it: algorithms/quota_lease.go), from which
// it admits requests in process, without a store call.
//
// The holder is Leases. Its files, from the top down, each use only those
// after it: store.go (its Store methods), take.go (a request decided from
// held leases), plan.go (the asks, sized by demand), renewal.go (leases
// renewed before they run out), grant.go (the store call, its grants
// held), sweep.go (leases ended as their time passes), giveback.go (their
// unused units given back, or dropped), answer.go (what a leased decision
// says), clock.go (a lease's life on this instance's clock), holder.go
// (Leases made, and what it reports), seen.go (which keys are tracked),
// table.go (the key table), demand.go (a key's demand).
package quota

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// Leases holds this instance's quota leases: the outermost wrapper of a
// shared store, it admits a request in process, without the store, when
// every zone of it holds a live lease of its key, granted under the
// request's limit, with units left for its cost; else it asks the next
// store, and asks it for a lease (algorithms.QuotaAsk.Units) sized by
// this instance's recent demand for each key, and installs the grants the
// answer carries.
//
// Never over: units are taken and the clock read under the locks of the
// request's keys, and that read is the admission instant; a lease is used
// only until S + (e − g)/(1 + 10⁻³) − 1 ms on the monotonic clock, S when
// its granting call was sent, g and e the grant's time and end on the
// store's clock, and not at all when e − g is under two round trips; a
// lease serves only the limit it was granted under. A lease running out
// (of units, or of time, within renewHorizon) is renewed by one grant-only
// call in the background; requests take from the earliest-ending lease
// first. A lease's unused units go back by one give-back when it ends,
// never retried; Forget drops leases without one (the store's generation
// has moved on); Close gives back every lease.
//
// Keys are spread over up to 64 shards by a maphash of the key, each with
// its own lock and its share of the bound on keys tracked (table.go).
// A request of which some zone does not lease (Quota.For 0, or a dry run)
// is passed on untouched: no lease decides it, and none would be granted.
type Leases struct {
	next     algorithms.Store
	lender   algorithms.QuotaLender // where give-backs go: the store that grants the leases
	holder   string
	observe  func(key string, kind LeaseEvent, units int64)
	now      func() time.Time
	start    time.Time // now when made: quotaShard.seen's times count from it
	keyTable           // the keys tracked: their demand and leases

	rtt     atomic.Int64          // the last round trip to next, ns
	held    atomic.Int64          // leases held: the sweep runs while some are
	denials *algorithms.DenyCache // cached denials dropped when a request's leases are held (DropsDenials)

	reported  bool       // the next store reports give-backs (GiveBacksReportedBy): they are counted as it takes or refuses them
	mu        sync.Mutex // orders background calls with Close
	closed    atomic.Bool
	calls     sync.WaitGroup // background calls (renewals, give-backs)
	autoSweep bool           // on the real clock, a goroutine sweeps while leases are held
	sweeping  bool
	sweeper   sync.WaitGroup
	stop      chan struct{}
}

// NewLeases holds quota leases of next for this instance, named holder in
// the stores' lease bookkeeping (an instance's ID, the same across
// reloads), tracking at most DefaultKeys keys. Give-backs go to lender,
// the store that grants the leases: next itself, or the store under
// next's wrappers (a deny cache and a breaker pass settlements on
// whatever they hold). observe, if not nil, is called with each zone
// key's leased units (LeaseEvent); it must be quick and must not call
// back.
func NewLeases(next algorithms.Store, lender algorithms.QuotaLender, holder string, observe func(key string, kind LeaseEvent, units int64)) *Leases {
	return NewLeasesOf(next, lender, holder, observe, DefaultKeys, nil)
}

// NewLeasesOf is NewLeases tracking at most keys keys, reading the
// monotonic clock from now (nil: time.Now). With a clock of its own (a
// replay's, which must never go back), nothing sweeps in the background:
// the caller calls Sweep as its clock advances.
func NewLeasesOf(next algorithms.Store, lender algorithms.QuotaLender, holder string, observe func(key string, kind LeaseEvent, units int64), keys int, now func() time.Time) *Leases {
	keys = max(1, keys)
	n := 1
	for n*2 <= maxQuotaShards && n*2*quotaShardMin <= keys {
		n *= 2
	}
	if observe == nil {
		observe = func(string, LeaseEvent, int64) {}
	}
	autoSweep := now == nil
	if autoSweep {
		now = time.Now
	}
	q := &Leases{next: next, lender: lender, holder: holder, observe: observe, now: now, start: now(), keyTable: keyTable{seed: maphash.MakeSeed(), shards: make([]quotaShard, n)},
		autoSweep: autoSweep, stop: make(chan struct{})}
	for i := range q.shards {
		q.shards[i].index = make(map[string]int32)
		q.shards[i].size = max(1, keys/n)
		q.shards[i].seen = make([]uint64, seenEntries(keys/n))
	}
	return q
}

// DefaultKeys bounds the keys a holder made by NewLeases tracks (their
// demand and their leases): at about 150 bytes a key, some 10 MB when
// full, besides 256 KB of units seen of keys not tracked (quotaShard.seen,
// 4 bytes a key).
const DefaultKeys = 65_536

// maxStackZones is how many zones a request may have for Allow to keep
// its scratch space on the stack.
const maxStackZones = 8

// GiveBacksReportedBy makes q count its give-backs as r, its lender,
// takes or refuses them (LeaseReturned,
// LeaseRefused), instead of as sent. Call it before q is used.
func (q *Leases) GiveBacksReportedBy(r algorithms.GiveBackReporter) {
	q.reported = true
	r.ReportGiveBacks(func(key string, units int64, taken bool) {
		kind := LeaseRefused
		if taken {
			kind = LeaseReturned
		}
		q.observe(key, kind, units)
	})
}

// DropsDenials makes q drop a request's denial cached in c once every
// zone of it holds a lease, so that c, looked up once q's leases could
// not decide a request (Take), holds no denial those leases would have
// to outlast. Call it before q is used.
func (q *Leases) DropsDenials(c *algorithms.DenyCache) { q.denials = c }

// LeaseEvent is what happened to leased units, for metrics: the observe
// callback of NewLeases gets a kind and a count of units.
type LeaseEvent uint8

const (
	// LeaseGranted: units a grant installed.
	LeaseGranted LeaseEvent = iota
	// LeaseUsed: units requests took from a lease (their costs).
	LeaseUsed
	// LeaseReturned: unused units of an ended lease given back: taken by
	// the store, when it reports give-backs (GiveBacksReportedBy), else
	// sent.
	LeaseReturned
	// LeaseExpired: unused units of a lease dropped without a give-back:
	// by Forget (a reset or an override of its key), or ended when the
	// store would surely refuse it.
	LeaseExpired
	// LeaseRefused: unused units of a give-back the store refused (its
	// key's generation moved on, it came too late): they stay counted
	// until their window ends.
	LeaseRefused
)

func (k LeaseEvent) String() string {
	switch k {
	case LeaseGranted:
		return "granted"
	case LeaseUsed:
		return "used"
	case LeaseReturned:
		return "returned"
	case LeaseExpired:
		return "expired"
	case LeaseRefused:
		return "refused"
	}
	return "unknown"
}

// quotaCallTimeout bounds a background call to the next store (a renewal,
// a give-back): a give-back later than that would mostly find its lease's
// window gone. quotaCloseWait bounds Close's wait for them.
const (
	quotaCallTimeout = time.Second
	quotaCloseWait   = 2 * time.Second
)

// background runs call in a goroutine Close waits for, and reports
// whether it did (not once q is closed).
func (q *Leases) background(call func(ctx context.Context)) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() {
		return false
	}
	q.calls.Add(1)
	go func() {
		defer q.calls.Done()
		ctx, cancel := context.WithTimeout(context.Background(), quotaCallTimeout)
		defer cancel()
		call(ctx)
	}()
	return true
}

// WaitCalls waits for the background calls in flight (renewals,
// give-backs, and those they start) to end. A replay on a clock of its
// own (NewLeasesOf) calls it before moving its clock on, so that each call
// happens at the time it was started.
func (q *Leases) WaitCalls() { q.calls.Wait() }

// sinceStart is now in µs since q was made, modulo 2^32 (about 71
// minutes: seenEnough compares spans of at most 2 ×
// algorithms.MaxQuotaLease).
func (q *Leases) sinceStart(now time.Time) uint32 {
	return uint32(now.Sub(q.start).Microseconds())
}
