package algorithms

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
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
// reset by an operator on another instance does not reach this cache (its
// denials end by themselves at their retry time), and on Redis Cluster a
// denial seen while another request's consumption was about to be refunded
// may outlast that refund. Remaining is as of the denial too: for
// token_bucket and sliding_log, whose quota comes back bit by bit, a cached
// r= may read lower than the store would now say.
//
// The cache is bounded, and every call does constant work under its one
// lock: denials sit in a ring in the order they were cached; a put expires
// at most expireSample of the oldest, and when the ring is full, the oldest
// denial gives way, expired or not (forgetting a denial early costs one
// store call, never exactness). An attacker with fresh keys thus recycles
// the ring; he cannot make it expensive.
type DenyCache struct {
	next Store

	mu      sync.Mutex
	denials map[string]*denial
	ring    []*denial // oldest at head; a slot whose denial left denials is stale
	head    int
	n       int // slots in use
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
	return &DenyCache{next: next, denials: make(map[string]*denial), ring: make([]*denial, max(1, size))}
}

// Allow answers a request denied before from the cache, with Cached set on
// its decisions, until the denial's retry time; otherwise it asks the next
// store and caches denials. A denial is dated when its reply arrived, so a
// cached Retry-After never runs early by the round trip.
func (c *DenyCache) Allow(ctx context.Context, reqs []Request) ([]Decision, error) {
	if settles(reqs) { // quota may come back early: never cached
		return c.next.Allow(ctx, reqs)
	}
	if ds := c.CachedAt(time.Now(), reqs); ds != nil {
		return ds, nil
	}
	ds, err := c.next.Allow(ctx, reqs)
	if err != nil || Admitted(reqs, ds) {
		return ds, err
	}
	c.RememberAt(time.Now(), reqs, ds)
	return ds, nil
}

// requestID joins the keys of reqs; limits and costs are compared on hit.
func requestID(reqs []Request) string {
	if len(reqs) == 1 {
		return reqs[0].Key
	}
	var b strings.Builder
	for _, r := range reqs {
		b.WriteString(r.Key)
		b.WriteByte(0)
	}
	return b.String()
}

// CachedAt returns the cached decisions of reqs at now, with their times
// counted down, or nil when reqs have no denial in force.
func (c *DenyCache) CachedAt(now time.Time, reqs []Request) []Decision {
	id := requestID(reqs)
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.denials[id]
	if !ok {
		return nil
	}
	if !now.Before(d.until) {
		delete(c.denials, id) // its ring slot goes stale
		return nil
	}
	if !slices.Equal(d.reqs, reqs) {
		return nil
	}
	elapsed := max(0, now.Sub(d.at))
	ds := make([]Decision, len(d.decisions))
	for i, past := range d.decisions {
		ds[i] = Decision{
			Allowed:    past.Allowed,
			Remaining:  past.Remaining,
			RetryAfter: max(0, past.RetryAfter-elapsed),
			ResetAfter: max(0, past.ResetAfter-elapsed),
			MoreAfter:  max(0, past.MoreAfter-elapsed),
			Cached:     true,
		}
	}
	return ds
}

// RememberAt caches the denial ds of reqs, decided at now, until the latest
// retry time of its denying zones: the request cannot pass before every one
// of them has quota back.
func (c *DenyCache) RememberAt(now time.Time, reqs []Request, ds []Decision) {
	var retry time.Duration
	for i, d := range ds {
		if !d.Allowed && !reqs[i].DryRun {
			retry = max(retry, d.RetryAfter)
		}
	}
	if retry <= 0 {
		return
	}
	d := &denial{id: requestID(reqs), reqs: slices.Clone(reqs), decisions: slices.Clone(ds), at: now, until: now.Add(retry)}
	c.mu.Lock()
	defer c.mu.Unlock()
	for range expireSample {
		if c.n == 0 || !c.dropOldest(func(old *denial) bool { return !now.Before(old.until) }) {
			break
		}
	}
	if c.n == len(c.ring) {
		c.dropOldest(func(*denial) bool { return true })
	}
	c.denials[d.id] = d // a denial of the same id before it goes stale
	c.ring[(c.head+c.n)%len(c.ring)] = d
	c.n++
}

// dropOldest frees the oldest ring slot when it is stale or drop says so,
// and reports whether it did.
func (c *DenyCache) dropOldest(drop func(*denial) bool) bool {
	old := c.ring[c.head]
	current := c.denials[old.id] == old
	if current && !drop(old) {
		return false
	}
	if current {
		delete(c.denials, old.id)
	}
	c.ring[c.head] = nil
	c.head = (c.head + 1) % len(c.ring)
	c.n--
	return true
}

// Len returns how many denials are cached.
func (c *DenyCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.denials)
}

// Peek asks the next store, which must be an Inspector.
func (c *DenyCache) Peek(ctx context.Context, reqs []Request) ([]Decision, error) {
	inspector, ok := c.next.(Inspector)
	if !ok {
		return nil, errors.New("store cannot peek")
	}
	return inspector.Peek(ctx, reqs)
}

// Reset drops the cached denial of key and resets it in the next store,
// which must be an Inspector.
func (c *DenyCache) Reset(ctx context.Context, key string) error {
	c.Forget(key)
	inspector, ok := c.next.(Inspector)
	if !ok {
		return errors.New("store cannot reset")
	}
	return inspector.Reset(ctx, key)
}

// Forget drops the cached denials of every request with key. It walks the
// cache: it is the admin API's, not the request path's.
func (c *DenyCache) Forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, d := range c.denials {
		if slices.ContainsFunc(d.reqs, func(r Request) bool { return r.Key == key }) {
			delete(c.denials, id)
		}
	}
}
