package algorithms

import (
	"context"
	"slices"
	"time"
)

// The rest of a deny cache's store contract: what it passes on to the
// next store, and what it forgets so that no denial outlives the state it
// came from (a reset, an override set or cleared, resets missed while a
// subscription was down).

// Peek asks the next store.
func (c *DenyCache) Peek(ctx context.Context, reqs []Request) ([]Decision, error) {
	return c.next.Peek(ctx, reqs)
}

// Reset resets key in the next store, then drops its cached denials: a
// denial read before the reset and answered after it is not cached
// (Forget).
func (c *DenyCache) Reset(ctx context.Context, key string) error {
	err := c.next.Reset(ctx, key)
	c.Forget(key)
	return err
}

// Settle passes the settlements to the next store. Denials of settled
// requests are never cached, so there is nothing to forget here.
func (c *DenyCache) Settle(ctx context.Context, ss []Settlement) error {
	return c.next.Settle(ctx, ss)
}

// SetOverride passes to the next store, then drops key's cached denials
// (a cached ban shows the limit in force).
func (c *DenyCache) SetOverride(ctx context.Context, key string, o Override, ttl time.Duration) error {
	err := c.next.SetOverride(ctx, key, o, ttl)
	c.Forget(key)
	return err
}

// ClearOverride passes to the next store, then drops key's cached
// denials.
func (c *DenyCache) ClearOverride(ctx context.Context, key string) error {
	err := c.next.ClearOverride(ctx, key)
	c.Forget(key)
	return err
}

// Forget drops the cached denials of every request with key, and keeps
// the denials then in flight from being cached (their store read may
// predate the reset Forget stands for). It walks the cache: it is the
// admin API's, not the request path's.
func (c *DenyCache) Forget(key string) {
	c.resets.Add(1)
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for id, d := range sh.denials {
			if slices.ContainsFunc(d.reqs, func(r Request) bool { return r.Key == key }) {
				delete(sh.denials, id)
			}
		}
		sh.mu.Unlock()
	}
}

// Drop drops the cached denial of the request with reqs' keys, if any:
// for a caller that learned it may pass now (a quota lease held for it).
// One lookup, as Cached's: it is the request path's.
func (c *DenyCache) Drop(reqs []Request) {
	var stack [256]byte
	id := appendRequestID(stack[:0], reqs)
	sh := c.shard(id)
	sh.mu.Lock()
	delete(sh.denials, string(id)) // its ring slot goes stale
	sh.mu.Unlock()
}

// ForgetAll drops every cached denial, and keeps the denials then in
// flight from being cached, as Forget does for one key: for resets that
// may have been missed (a reset subscription that was down). Each shard's
// lock is held for a fresh map and a cleared ring; it is not the request
// path's.
func (c *DenyCache) ForgetAll() {
	c.resets.Add(1)
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		sh.denials = make(map[string]*denial)
		clear(sh.ring)
		sh.head, sh.n = 0, 0
		sh.mu.Unlock()
	}
}

// Interface guards
var _ Store = (*DenyCache)(nil)
