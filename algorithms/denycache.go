package algorithms

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"
)

// maxDenials bounds the deny cache; when it is full, denials are not cached
// until expired ones are swept.
const maxDenials = 100_000

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
// may outlast that refund.
type DenyCache struct {
	next Store

	mu      sync.Mutex
	denials map[string]denial
	puts    int
}

type denial struct {
	reqs      []Request
	decisions []Decision
	at        time.Time
	until     time.Time
}

// NewDenyCache caches the denials of next.
func NewDenyCache(next Store) *DenyCache {
	return &DenyCache{next: next, denials: make(map[string]denial)}
}

// Allow answers a request denied before from the cache, with Cached set on
// its decisions, until the denial's retry time; otherwise it asks the next
// store and caches denials.
func (c *DenyCache) Allow(ctx context.Context, reqs []Request) ([]Decision, error) {
	if settles(reqs) { // quota may come back early: never cached
		return c.next.Allow(ctx, reqs)
	}
	now := time.Now()
	id := requestID(reqs)
	if ds := c.lookup(id, reqs, now); ds != nil {
		return ds, nil
	}
	ds, err := c.next.Allow(ctx, reqs)
	if err != nil || Admitted(reqs, ds) {
		return ds, err
	}
	c.put(id, reqs, ds, now)
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

func (c *DenyCache) lookup(id string, reqs []Request, now time.Time) []Decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.denials[id]
	if !ok || !now.Before(d.until) || !slices.Equal(d.reqs, reqs) {
		return nil
	}
	elapsed := now.Sub(d.at)
	ds := make([]Decision, len(d.decisions))
	for i, past := range d.decisions {
		ds[i] = Decision{
			Allowed:    past.Allowed,
			Remaining:  past.Remaining,
			RetryAfter: max(0, past.RetryAfter-elapsed),
			ResetAfter: max(0, past.ResetAfter-elapsed),
			Cached:     true,
		}
	}
	return ds
}

// put caches a denial until the latest retry time of its denying zones:
// the request cannot pass before every one of them has quota back.
func (c *DenyCache) put(id string, reqs []Request, ds []Decision, now time.Time) {
	var retry time.Duration
	for i, d := range ds {
		if !d.Allowed && !reqs[i].DryRun {
			retry = max(retry, d.RetryAfter)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
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
	c.denials[id] = denial{reqs: slices.Clone(reqs), decisions: slices.Clone(ds), at: now, until: now.Add(retry)}
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

// Forget drops the cached denials of every request with key.
func (c *DenyCache) Forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, d := range c.denials {
		if slices.ContainsFunc(d.reqs, func(r Request) bool { return r.Key == key }) {
			delete(c.denials, id)
		}
	}
}
