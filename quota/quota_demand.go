package quota

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// DefaultKeys bounds the keys a Leases made by NewLeases
// tracks (their demand and their leases): at about 150 bytes a key, some
// 10 MB when full, besides 256 KB of units seen of keys not tracked
// (quotaShard.seen, 4 bytes a key).
const DefaultKeys = 65_536

// quotaKeyTries is how many slots an insertion into a full shard looks at
// for one to reuse: a slot used since the hand last passed it, or holding
// leases, gets a second chance, up to the last try, which takes its slot
// whatever it holds. A constant, so an insertion does bounded work.
const quotaKeyTries = 4

// demand is a key's recent demand in units: cur since start, prev in the
// span before it. A span is two quota_leases (demandSpan), so an estimate
// covers two to four of them.
type demand struct {
	start     time.Time
	since     time.Time // when this run of demand began: the key was cold before
	cur, prev int64
	// mark is when ask first saw this run fastDemandFor old, marked the
	// units of the run then: fast measures the run's rate after it
	mark   time.Time
	marked int64
	fast   bool // this run was fast once: it is warm
}

// demandWarmup is how long a key's demand must have lasted before it
// asks for a lease (a span, when shorter), unless it is fast: a burst
// shorter than that, such as a client's concurrent requests, is decided
// in the store, exactly; a lease would strand its units on the instances
// the burst leaves first.
const demandWarmup = 500 * time.Millisecond

// A demand is fast, and asks for a lease before demandWarmup, when it
// keeps up fastDemandRate units a second (at least) for fastDemandFor
// after its first fastDemandFor: a hot key (a batch job, a retry storm)
// leases within about twice fastDemandFor, while a client's burst of
// concurrent requests, over within fastDemandFor, and a key a few hundred
// times a second wait out demandWarmup; and the lease is sized by the
// rate after the first fastDemandFor, the burst left out.
const (
	fastDemandFor  = 20 * time.Millisecond
	fastDemandRate = 1000
)

// demandSpan is the span demand counts in for a zone of quota_lease
// leaseFor: long enough to smooth bursts, short enough to follow a change
// within a few leases.
func demandSpan(leaseFor time.Duration) time.Duration { return 2 * leaseFor }

// roll moves d's spans to hold now.
func (d *demand) roll(now time.Time, span time.Duration) {
	elapsed := now.Sub(d.start)
	switch {
	case d.start.IsZero() || elapsed < 0 || elapsed >= 2*span:
		*d = demand{start: now, since: now}
	case elapsed >= span:
		d.start, d.prev, d.cur = d.start.Add(span), d.cur, 0
	}
}

// within is the units demanded in the span up to now (d rolled to now):
// the current span's, and the share of the previous one still in it.
func (d *demand) within(now time.Time, span time.Duration) float64 {
	left := float64(span-now.Sub(d.start)) / float64(span)
	return float64(d.cur) + float64(d.prev)*max(0, left)
}

// over is the units the demand up to now uses in d: the rate of the last
// span over a duration.
func (d *demand) over(now time.Time, span, during time.Duration) float64 {
	return d.within(now, span) * float64(during) / float64(span)
}

// ask is the units to ask for a lease that serves for life (leaseLife):
// what the demand up to now uses in one, or 0 for a cold key: one whose
// demand has not lasted demandWarmup (or a span, when shorter) and was
// never fast in this run (fastDemandRate and fastDemandFor), or would not
// use 2. Within the first span, a fast run's demand is its rate since
// mark, the burst that may have begun it left out.
func (d *demand) ask(now time.Time, span, life time.Duration) int64 {
	lasted := now.Sub(d.since)
	if lasted < span { // d.start is d.since: cur is all of this run
		if d.mark.IsZero() && lasted >= fastDemandFor {
			d.mark, d.marked = now, d.cur
		}
		if after := now.Sub(d.mark); !d.mark.IsZero() && after >= fastDemandFor {
			rate := float64(d.cur-d.marked) / after.Seconds()
			d.fast = d.fast || rate >= fastDemandRate
			if d.fast && lasted < min(span, demandWarmup) {
				return units(rate * life.Seconds())
			}
		}
	}
	if lasted < min(span, demandWarmup) {
		return 0
	}
	return units(d.over(now, span, life))
}

// units is a demand's ask of n units: 0 below 2, at most MaxEvents.
func units(n float64) int64 {
	if n < 2 {
		return 0
	}
	return int64(min(n, algorithms.MaxEvents))
}

// quotaKey is what a Leases holds of one key: its demand, and its
// leases, earliest ending first (a spent lease leaves the list).
type quotaKey struct {
	key    string
	demand demand
	leases []*quotaLease
	latest *quotaLease // the latest grant held, spent or not: its Remaining is the store's latest word
	taken  int64       // units taken from the key's leases since latest was held
	// shown is the least r answered for the key in the fixed window
	// ending at shownUntil (µs of the store's clock): steady
	shown, shownUntil int64
	renewing          bool  // a renewal of a request with this key is in flight
	touched           bool  // used since the eviction hand passed
	heldAt            int32 // index in the shard's held, -1 when it holds no lease
}

// quotaShard is one lock's share of a Leases: a map of its keys to
// their slots, at most cap(slots) of them, reused in the order of a clock
// hand (quotaKeyTries), and the slots that hold leases, which the sweep
// walks.
type quotaShard struct {
	mu     sync.Mutex
	resets atomic.Uint64 // Forget calls of its keys: a grant asked before one is not held
	index  map[string]int32
	slots  []quotaKey
	size   int
	hand   int
	held   []int32
	seen   []uint64 // units seen of keys not tracked (seenEnough)
	_      [64]byte
}

// find is key's slot, or nil.
func (sh *quotaShard) find(key string) *quotaKey {
	i, ok := sh.index[key]
	if !ok {
		return nil
	}
	k := &sh.slots[i]
	k.touched = true
	return k
}

// findOrAdd is key's slot, a new one if it has none (add).
func (sh *quotaShard) findOrAdd(key string, dropped []*quotaLease) (*quotaKey, []*quotaLease) {
	if k := sh.find(key); k != nil {
		return k, dropped
	}
	return sh.add(key, dropped)
}

// add is a new slot for key, which has none. When the shard is full, the
// slot it reuses drops its key: its leases, if any, are appended to
// dropped (to give back).
func (sh *quotaShard) add(key string, dropped []*quotaLease) (*quotaKey, []*quotaLease) {
	var i int
	if len(sh.slots) < sh.size {
		sh.slots = append(sh.slots, quotaKey{})
		i = len(sh.slots) - 1
	} else {
		i = sh.victim()
		old := &sh.slots[i]
		dropped = append(dropped, old.leases...)
		sh.setLeases(old, nil)
		old.latest = nil
		delete(sh.index, old.key)
	}
	sh.slots[i] = quotaKey{key: key, touched: true, heldAt: -1}
	sh.index[key] = int32(i)
	return &sh.slots[i], dropped
}

// seenEnough reports whether a key of hash h, not tracked, has been
// seen for at least quotaTrackUnits units within span (since a first
// sighting at most span before now, µs since its Leases was made),
// counting this sighting of cost units. A shard tracks a key (gives it a
// slot, and counts its demand there) only from then: a key seen rarely,
// as each of many cold keys is (and each of a flood of made-up keys),
// costs an entry of seen instead of a slot, and seldom evicts a key in
// use. An entry holds a fingerprint (h's top 24 bits), the units counted
// (to 255) and the first sighting's time. Another key's entry is taken
// over only once older than span or counting no more units than this
// sighting, so a key warming up keeps its count against a stream of cold
// ones; an entry that another key matches by chance hastens a tracking.
func (sh *quotaShard) seenEnough(h uint64, now uint32, cost int64, span time.Duration) bool {
	e := &sh.seen[uint32(h>>8)&uint32(len(sh.seen)-1)] // above the shard's bits
	fp, units, first := h>>40, uint64(min(max(cost, 0), 255)), now
	recent, counted := time.Duration(now-uint32(*e))*time.Microsecond <= span, (*e>>32)&0xff
	switch {
	case *e>>40 == fp && recent:
		units, first = min(units+counted, 255), uint32(*e)
	case recent && counted > units: // another key's, warmer: kept
		return units >= quotaTrackUnits
	}
	*e = fp<<40 | units<<32 | uint64(first)
	return units >= quotaTrackUnits
}

// quotaTrackUnits is the least demand within a span that can ask for a
// lease (demand.ask: 2 units a lease, a span being two).
const quotaTrackUnits = 4

// seenEntries is the size of a shard's seen record for a shard of keys
// slots: half as many, a power of two, at least 64 (8 bytes each).
func seenEntries(keys int) int {
	n := 64
	for n*2 <= keys/2 {
		n *= 2
	}
	return n
}

// victim is the slot a full shard reuses (quotaKeyTries).
func (sh *quotaShard) victim() int {
	for try := 1; ; try++ {
		i := sh.hand
		sh.hand = (sh.hand + 1) % len(sh.slots)
		k := &sh.slots[i]
		if try == quotaKeyTries || (!k.touched && len(k.leases) == 0) {
			return i
		}
		k.touched = false
	}
}

// setLeases sets k's leases, keeping the shard's list of slots holding
// leases.
func (sh *quotaShard) setLeases(k *quotaKey, leases []*quotaLease) {
	k.leases = leases
	switch {
	case len(leases) > 0 && k.heldAt < 0:
		k.heldAt = int32(len(sh.held))
		sh.held = append(sh.held, sh.index[k.key])
	case len(leases) == 0 && k.heldAt >= 0:
		last := sh.held[len(sh.held)-1]
		sh.held[k.heldAt] = last
		sh.slots[last].heldAt = k.heldAt
		sh.held = sh.held[:len(sh.held)-1]
		k.heldAt = -1
	}
}

// remove takes lease l out of k's, and reports whether k held it.
func (sh *quotaShard) remove(k *quotaKey, l *quotaLease) bool {
	i := slices.Index(k.leases, l)
	if i < 0 {
		return false
	}
	sh.setLeases(k, slices.Delete(k.leases, i, i+1))
	return true
}

// sinceStart is now in µs since q was made, modulo 2^32 (about 71
// minutes: seenEnough compares spans of at most 2 × MaxQuotaLease).
func (q *Leases) sinceStart(now time.Time) uint32 {
	return uint32(now.Sub(q.start).Microseconds())
}
