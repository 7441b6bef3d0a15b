package algorithms

import (
	"context"
	"errors"
	"sync"
	"time"
)

// maxDenials bounds the deny cache; when it is full, denials are not cached
// until expired ones are swept.
const maxDenials = 100_000

// DenyCache remembers denials locally, per key, until the time one unit of
// quota returns: other instances only consume, so no request of at least
// the denied cost can pass before then, and the answer is exact without
// asking the store (the idea of Envoy's over-limit cache). A flood on one
// key thus costs the store nothing until its retry time.
//
// Two limits of the exactness: a reset by an operator on another instance
// does not reach this cache (its denials end by themselves at their retry
// time), and on Redis Cluster a denial seen while another request's
// consumption was about to be refunded may outlast that refund.
type DenyCache struct {
	next Store

	mu      sync.Mutex
	denials map[string]denial
	puts    int
}

type denial struct {
	limit   Limit
	cost    int64 // the denied cost: larger costs are denied too
	until   time.Time
	reset   time.Time
	remains int64
}

// NewDenyCache caches the denials of next.
func NewDenyCache(next Store) *DenyCache {
	return &DenyCache{next: next, denials: make(map[string]denial)}
}

// Allow answers from the cache when an enforced zone of reqs is known to
// deny; then that zone's decision is Cached and the other zones are
// Undecided. Otherwise it asks the next store and caches its denials.
func (c *DenyCache) Allow(ctx context.Context, reqs []Request) ([]Decision, error) {
	now := time.Now()
	if ds := c.lookup(reqs, now); ds != nil {
		return ds, nil
	}
	ds, err := c.next.Allow(ctx, reqs)
	if err != nil || Admitted(reqs, ds) {
		return ds, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, d := range ds {
		if !d.Allowed && !reqs[i].DryRun {
			c.put(reqs[i], d, now)
		}
	}
	return ds, nil
}

func (c *DenyCache) lookup(reqs []Request, now time.Time) []Decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range reqs {
		d, ok := c.denials[r.Key]
		if !ok || r.DryRun || r.Cost < d.cost || d.limit != r.Limit || !now.Before(d.until) {
			continue
		}
		ds := make([]Decision, len(reqs))
		for j := range ds {
			ds[j].Undecided = true
		}
		ds[i] = Decision{
			Remaining:  d.remains,
			RetryAfter: d.until.Sub(now),
			ResetAfter: max(0, d.reset.Sub(now)),
			Cached:     true,
		}
		return ds
	}
	return nil
}

func (c *DenyCache) put(r Request, d Decision, now time.Time) {
	if prev, ok := c.denials[r.Key]; ok && prev.cost < r.Cost && now.Before(prev.until) {
		return // keep the denial that covers more costs
	}
	if c.puts++; c.puts%1024 == 0 || len(c.denials) >= maxDenials {
		for k, old := range c.denials {
			if !now.Before(old.until) {
				delete(c.denials, k)
			}
		}
	}
	if len(c.denials) >= maxDenials {
		return
	}
	c.denials[r.Key] = denial{
		limit: r.Limit, cost: r.Cost, remains: d.Remaining,
		until: now.Add(d.RetryAfter), reset: now.Add(d.ResetAfter),
	}
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

// Forget drops the cached denial of key.
func (c *DenyCache) Forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.denials, key)
}
