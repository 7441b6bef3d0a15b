package quota

import (
	"context"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// The holder as a Store: Allow and Take decide from held leases first
// (take.go) and ask the next store otherwise (grant.go); Peek, Settle,
// Reset and the overrides pass to the next store, the last three dropping
// the key's leases (Forget); Close gives back every lease.

// Allow admits reqs from their leases when every zone holds one for its
// cost (as Take does), else asks the next store, with an ask for a lease
// per zone, and installs the grants of its answer. Asking none, it names
// this holder in reqs (Quota.Holder): the store counts it as a taker.
func (q *Leases) Allow(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	if !allLease(reqs) || q.closed.Load() {
		return q.next.Allow(ctx, reqs)
	}
	var askBuf [maxStackZones]int64
	ds, asks := q.decide(reqs, askBuf[:0], false)
	if ds != nil {
		return ds, nil
	}
	return q.ask(ctx, reqs, asks)
}

// Take admits reqs from their leases, with no call, when every zone holds
// one for its cost; else it returns nil and records nothing, for Allow to
// decide them. So a caller may try it before what only a call needs (a
// deadline, a cached denial, which a held lease has dropped). A zone
// admitted from a lease answers Leased, with the grant's decision: Quota
// its grant, Remaining the store's at the key's latest grant plus the
// units of its limit leased not yet used (quotaKey.remaining), At,
// ResetAfter and MoreAfter moved on by the time since the grant's answer
// (at the store's slowest, so that t is never early).
func (q *Leases) Take(reqs []algorithms.Request) []algorithms.Decision {
	if !allLease(reqs) || q.closed.Load() {
		return nil
	}
	var askBuf [maxStackZones]int64
	ds, _ := q.decide(reqs, askBuf[:0], true)
	return ds
}

// allLease reports whether every zone of reqs leases, so that a lease may
// decide them and a grant may be made.
func allLease(reqs []algorithms.Request) bool {
	for i := range reqs {
		if !reqs[i].Leases() || reqs[i].DryRun {
			return false
		}
	}
	return len(reqs) > 0
}

// Peek asks the next store: a look consumes nothing, and no lease.
func (q *Leases) Peek(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	return q.next.Peek(ctx, reqs)
}

// Settle passes the settlements to the next store.
func (q *Leases) Settle(ctx context.Context, ss []algorithms.Settlement) error {
	return q.next.Settle(ctx, ss)
}

// Reset resets key in the next store, then drops its leases (Forget).
func (q *Leases) Reset(ctx context.Context, key string) error {
	err := q.next.Reset(ctx, key)
	q.Forget(key)
	return err
}

// SetOverride passes to the next store, then drops key's leases: they
// were granted under the limit before.
func (q *Leases) SetOverride(ctx context.Context, key string, o algorithms.Override, ttl time.Duration) error {
	err := q.next.SetOverride(ctx, key, o, ttl)
	q.Forget(key)
	return err
}

// ClearOverride passes to the next store, then drops key's leases.
func (q *Leases) ClearOverride(ctx context.Context, key string) error {
	err := q.next.ClearOverride(ctx, key)
	q.Forget(key)
	return err
}

// Close gives back every lease held (a reload or a stop), in one call,
// and waits for the background calls to end, at most quotaCloseWait.
// Afterwards requests pass to the next store, and no lease is held.
func (q *Leases) Close() error {
	q.mu.Lock()
	if q.closed.Load() {
		q.mu.Unlock()
		return nil
	}
	q.closed.Store(true)
	close(q.stop)
	q.mu.Unlock()
	all := q.takeAll()
	q.held.Add(-int64(len(all)))
	q.giveBack(all) // closed: in this goroutine
	done := make(chan struct{})
	go func() {
		q.sweeper.Wait()
		q.calls.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(quotaCloseWait):
	}
	return nil
}

// Interface guards
var _ algorithms.Store = (*Leases)(nil)
