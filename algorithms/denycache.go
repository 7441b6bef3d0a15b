package algorithms

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultDenials bounds a deny cache made by NewDenyCache: at about 300
// bytes a denial, some 30 MB when full.
const DefaultDenials = 100_000

// expireSample is how many of the oldest denials a put examines for expiry:
// a constant, so that a put does bounded work whatever the cache holds.
const expireSample = 2

// DenyCache remembers denied requests locally until the time the denying
// zones' quota returns: other instances only consume, so no identical
// request can pass before then, and the answer is exact without asking the
// store (the idea of Envoy's over-limit cache). A flood from one client
// thus costs the store nothing until its retry time.
//
// A request is identified by its zones' keys, limits and costs. Answered
// from the cache, the denying zones report their state exactly; the other
// zones report theirs as of the denial. Two limits of the exactness: a
// reset by an operator on another instance reaches this cache only when
// its owner hears of it and calls Forget (Sluice's Redis clients do, on
// redisstore.ResetChannel; else its denials end by themselves at their
// retry time, a ban's at the ban's end), and on Redis Cluster a
// denial seen while another request's consumption was about to be refunded
// may outlast that refund. Remaining is as of the denial too: for
// token_bucket and sliding_log, whose quota comes back bit by bit, a cached
// r= may read lower than the store would now say.
//
// The cache is bounded, and every call does constant work under one lock:
// denials sit in a ring in the order they were cached; a put expires at
// most expireSample of the oldest, and when the ring is full, the oldest
// denial gives way, expired or not (forgetting a denial early costs one
// store call, never exactness). An attacker with fresh keys thus recycles
// the ring; he cannot make it expensive.
//
// The cache is split over up to 64 shards by a hash of the request (a
// maphash of its keys), each with its own lock, map and ring of its share
// of the size, so that concurrent requests rarely meet on a lock; "the
// oldest" is then the shard's oldest. A cache of fewer than 2×denyShardMin
// denials keeps one shard, and so one exact oldest-first order.
//
// Requests that settle after their response, or of a zone with overrides,
// are answered and remembered only while one of their zones bans them: a
// banned request consumes nothing anywhere, and no refund or raised limit
// lifts a ban (only a reset, which calls Forget), so caching it is exact.
//
// A reset is never undone by a decision read before it: Forget counts
// resets, a call to the next store takes the count before it is sent, and
// its denial is remembered only if no Forget came since (one atomic load
// each way: a reset costs the denials then in flight one call each).
type DenyCache struct {
	next   Store
	seed   maphash.Seed
	shards []denyShard
	resets atomic.Uint64 // Forget calls: a denial read before one is not remembered
}

// denyShardMin is the fewest denials a shard is given: below it, the
// cache takes fewer shards rather than tiny rings.
const denyShardMin = 1024

// denyShard is one lock's share of the cache.
type denyShard struct {
	mu      sync.Mutex
	denials map[string]*denial
	ring    []*denial // oldest at head; a slot whose denial left denials is stale
	head    int
	n       int // slots in use
	_       [64]byte
}

type denial struct {
	id        string
	reqs      []Request
	decisions []Decision
	at        time.Time
	until     time.Time
}

// NewDenyCache caches the denials of next, at most DefaultDenials.
func NewDenyCache(next Store) *DenyCache {
	return NewDenyCacheOf(next, DefaultDenials)
}

// NewDenyCacheOf caches at most size denials of next.
func NewDenyCacheOf(next Store, size int) *DenyCache {
	size = max(1, size)
	n := 1
	for n*2 <= maxDenyShards && n*2*denyShardMin <= size {
		n *= 2
	}
	c := &DenyCache{next: next, seed: maphash.MakeSeed(), shards: make([]denyShard, n)}
	for i := range c.shards {
		c.shards[i].denials = make(map[string]*denial)
		c.shards[i].ring = make([]*denial, size/n)
	}
	return c
}

// maxDenyShards bounds the shards of a deny cache.
const maxDenyShards = 64

// shard is the shard of the request whose ID is id.
func (c *DenyCache) shard(id []byte) *denyShard {
	return &c.shards[maphash.Bytes(c.seed, id)&uint64(len(c.shards)-1)]
}

// Allow answers a request denied before from the cache, with Cached set on
// its decisions, until the denial's retry time; otherwise it asks the next
// store and caches denials. A denial is dated when its reply arrived, so a
// cached Retry-After never runs early by the round trip.
func (c *DenyCache) Allow(ctx context.Context, reqs []Request) ([]Decision, error) {
	if ds := c.Cached(reqs); ds != nil {
		return ds, nil
	}
	return c.AllowUncached(ctx, reqs)
}

// Cached is the cached denial of reqs now, or nil: Allow's first step, for
// a caller that prepares the store call (a timeout) only when there is one.
func (c *DenyCache) Cached(reqs []Request) []Decision {
	if uncacheable(reqs) && !anyBans(reqs) { // quota may come back early, or a limit rise: only a ban is cached
		return nil
	}
	return c.cachedAt(time.Now, reqs)
}

// AllowUncached is Allow after Cached found nothing: it asks the next
// store and caches denials, unless a reset came while it asked.
func (c *DenyCache) AllowUncached(ctx context.Context, reqs []Request) ([]Decision, error) {
	resets := c.resets.Load()
	ds, err := c.next.Allow(ctx, reqs)
	if err != nil || Admitted(reqs, ds) {
		return ds, err
	}
	c.remember(time.Now(), resets, reqs, ds)
	return ds, nil
}

// Uncached is c for a caller that looks up Cached itself first (the
// handler, before a request takes a place among the waiting): its Allow is
// AllowUncached, so the denial is not looked up twice; everything else is
// c's.
func (c *DenyCache) Uncached() Store { return uncachedDenyCache{c} }

type uncachedDenyCache struct{ *DenyCache }

func (c uncachedDenyCache) Allow(ctx context.Context, reqs []Request) ([]Decision, error) {
	return c.AllowUncached(ctx, reqs)
}

// anyBans reports whether some zone of reqs can be banned.
func anyBans(reqs []Request) bool {
	for i := range reqs {
		if reqs[i].Bans() {
			return true
		}
	}
	return false
}

// sameRequests reports whether a and b are the same request for the
// cache: the same zones, keys, limits and costs. A concurrency zone's
// slot, new for every request, is no part of it, nor is max_delay, which
// only moves the retry time (waitingRetry): a request that could not take
// a place among the waiting drops it, and is still the same request; nor
// is a quota lease's ask (its quota_lease, units, shortest lease and
// holder), which the lease holder fills in, following the instance's
// demand (a key it does not track goes as not leasing): the denial of a
// request it sent answers the handler's.
func sameRequests(a, b []Request) bool {
	return slices.EqualFunc(a, b, func(x, y Request) bool {
		x.Slot, y.Slot = "", ""
		x.Limit.MaxDelay, y.Limit.MaxDelay = 0, 0
		x.Quota, y.Quota = QuotaAsk{}, QuotaAsk{}
		return x == y
	})
}

// waitingRetry is, elapsed after a zone denied past (decided for a
// request with max_delay from), when a request with max_delay to can pass
// there: a token bucket's denial is the request's turn less from, and a
// request whose turn comes within to is admitted with a reservation, so
// its retry is that turn less to (≤ 0: it may pass now). A ban does not
// wait: its retry is its own.
func waitingRetry(past Decision, from, to, elapsed time.Duration) time.Duration {
	if past.Banned {
		return past.RetryAfter - elapsed
	}
	return past.RetryAfter + from - to - elapsed
}

// appliedMaxDelay is the max_delay the store applied, or would apply, to
// r where it decided past: none for a request whose cost is above the
// capacity in force (nothing it waits for admits it, and its retry is the
// window whatever its max_delay), else AppliedMaxDelay.
func appliedMaxDelay(r Request, past Decision) time.Duration {
	l := r.Limit
	if past.Override.Set() {
		l = past.Override.Apply(l)
	}
	if r.Cost > l.Capacity() {
		return 0
	}
	return r.AppliedMaxDelay()
}

// appendRequestID appends the keys of reqs, each ended by a 0 byte, to buf:
// the ID of a request, whose limits and costs are compared on hit. Built
// on the caller's stack, it costs a lookup no allocation.
func appendRequestID(buf []byte, reqs []Request) []byte {
	for _, r := range reqs {
		buf = append(append(buf, r.Key...), 0)
	}
	return buf
}

// CachedAt returns the cached decisions of reqs at now, with their times
// counted down, or nil when reqs have no denial in force.
func (c *DenyCache) CachedAt(now time.Time, reqs []Request) []Decision {
	return c.cachedAt(func() time.Time { return now }, reqs)
}

// cachedAt is CachedAt at the time clock reads, read only once a denial
// of reqs is found: a request never denied (most are) does not pay for
// reading the clock.
func (c *DenyCache) cachedAt(clock func() time.Time, reqs []Request) []Decision {
	var stack [256]byte
	id := appendRequestID(stack[:0], reqs)
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	d, ok := sh.denials[string(id)]
	if !ok {
		return nil
	}
	now := clock()
	if !now.Before(d.until) {
		delete(sh.denials, d.id) // its ring slot goes stale
		return nil
	}
	if !sameRequests(d.reqs, reqs) {
		return nil
	}
	return d.answerAt(now, reqs)
}

// answerAt is d's decisions for reqs, the same request, at now, or nil
// when no zone of d that denied still denies reqs: a zone with max_delay
// denies only while the request's turn is further than its max_delay
// (waitingRetry), which may differ from the max_delay d was decided with.
func (d *denial) answerAt(now time.Time, reqs []Request) []Decision {
	bansOnly := uncacheable(reqs)
	elapsed := max(0, now.Sub(d.at))
	ds := make([]Decision, len(d.decisions))
	denies := false
	for i, past := range d.decisions {
		retry := waitingRetry(past, appliedMaxDelay(d.reqs[i], past), appliedMaxDelay(reqs[i], past), elapsed)
		if !past.Allowed && !reqs[i].DryRun && (past.Banned || !bansOnly) && retry > 0 {
			denies = true
		}
		ds[i] = Decision{
			Allowed:    past.Allowed,
			Remaining:  past.Remaining,
			RetryAfter: max(0, retry),
			ResetAfter: max(0, past.ResetAfter-elapsed),
			MoreAfter:  max(0, past.MoreAfter-elapsed),
			Override:   past.Override, // the limit in force, for the headers
			Banned:     past.Banned,   // a ban is cached until it ends; it started once, not here
			Cached:     true,
		}
		if !past.Allowed {
			ds[i].MoreAfter = min(ds[i].MoreAfter, ds[i].RetryAfter) // a denial's t never past its retry
		} else {
			ds[i].RetryAfter = 0
		}
	}
	if !denies {
		return nil
	}
	return ds
}

// RememberAt caches the denial ds of reqs, decided at now, until the latest
// retry time of its denying zones: the request cannot pass before every one
// of them has quota back. A request that settles or has overrides is
// cached only while a zone bans it, until the latest ban's end. A zone
// whose key has units out in quota leases may have some back at their
// latest end (given back unused): it counts no later than that.
func (c *DenyCache) RememberAt(now time.Time, reqs []Request, ds []Decision) {
	c.remember(now, c.resets.Load(), reqs, ds)
}

// remember is RememberAt for a denial read when Forget had been called
// resets times: after another Forget it is not cached, since the reset
// may have come after the store's read.
func (c *DenyCache) remember(now time.Time, resets uint64, reqs []Request, ds []Decision) {
	bansOnly := uncacheable(reqs)
	var retry time.Duration
	for i, d := range ds {
		if !d.Allowed && !reqs[i].DryRun && (d.Banned || !bansOnly) {
			retry = max(retry, d.untilQuotaBack())
		}
	}
	if retry <= 0 {
		return
	}
	id := appendRequestID(nil, reqs)
	d := &denial{id: string(id), reqs: slices.Clone(reqs), decisions: slices.Clone(ds), at: now, until: now.Add(retry)}
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c.resets.Load() != resets { // under the lock: Forget counts, then takes it
		return
	}
	sh.remember(now, d)
}

// remember caches d, first freeing at most expireSample expired slots and,
// when the ring is full, its oldest.
func (sh *denyShard) remember(now time.Time, d *denial) {
	for range expireSample {
		if sh.n == 0 || !sh.dropOldest(func(old *denial) bool { return !now.Before(old.until) }) {
			break
		}
	}
	if sh.n == len(sh.ring) {
		sh.dropOldest(func(*denial) bool { return true })
	}
	sh.denials[d.id] = d // a denial of the same id before it goes stale
	sh.ring[(sh.head+sh.n)%len(sh.ring)] = d
	sh.n++
}

// dropOldest frees the oldest ring slot when it is stale or drop says so,
// and reports whether it did.
func (sh *denyShard) dropOldest(drop func(*denial) bool) bool {
	old := sh.ring[sh.head]
	current := sh.denials[old.id] == old
	if current && !drop(old) {
		return false
	}
	if current {
		delete(sh.denials, old.id)
	}
	sh.ring[sh.head] = nil
	sh.head = (sh.head + 1) % len(sh.ring)
	sh.n--
	return true
}

// Len returns how many denials are cached.
func (c *DenyCache) Len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.denials)
		sh.mu.Unlock()
	}
	return n
}

// untilQuotaBack is how long a denial d stands: its retry, but no later
// than the latest end of its key's quota leases while units are out and
// it is no ban.
func (d Decision) untilQuotaBack() time.Duration {
	if d.Banned || d.Quota.Out <= 0 || d.Quota.End <= d.At {
		return d.RetryAfter
	}
	return min(d.RetryAfter, time.Duration(d.Quota.End-d.At)*time.Microsecond)
}
