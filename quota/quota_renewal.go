package quota

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// The life of a Leases' leases after their grant: held, renewed
// before they run out, ended (their unused units given back once), and
// dropped when their key is reset.

// quotaCallTimeout bounds a background call to the next store (a renewal,
// a give-back): a give-back later than that would mostly find its lease's
// window gone. quotaCloseWait bounds Close's wait for them.
const (
	quotaCallTimeout = time.Second
	quotaCloseWait   = 2 * time.Second
)

// Bounds on the sweep's sleep: it wakes at the earliest lease end, but no
// sooner than quotaSweepMin after its last round (bounding its work under
// many leases) and no later than quotaSweepMax.
const (
	quotaSweepMin = 5 * time.Millisecond
	quotaSweepMax = 100 * time.Millisecond
)

// renewHorizon is how far ahead a key's leases must last for no renewal
// to be due: two round trips (the renewal's, and one to spare) and a
// sweep's least pause (quotaSweepMin: slack for a pause of this
// process), or an eighth of a lease's life (leaseLife) when that is
// longer, so that a fast store still renews ahead of a burst.
func renewHorizon(rtt, life time.Duration) time.Duration {
	return max(2*rtt+quotaSweepMin, life/8)
}

// due reports whether k's leases of r's limit, taken from at now, need a
// renewal: left, their units not yet used, are under what the demand uses
// within the renewal horizon h, or last, their latest end, is within it
// and was not set by the store's boundary (a window's or a slot's end:
// cut), which a lease granted before it would end at too.
func (q *Leases) due(now time.Time, k *quotaKey, r *algorithms.Request, left int64, last time.Time, h time.Duration) bool {
	if k.renewing {
		return false
	}
	return float64(left) < k.demand.over(now, demandSpan(r.Quota.For), h) || last.Sub(now) < h && !k.cutAt(last)
}

// cutAt reports whether k's lease ending at end was cut short of its life
// by the store (it ends with its window or slot).
func (k *quotaKey) cutAt(end time.Time) bool {
	for _, l := range k.leases {
		if l.end.Equal(end) {
			return l.cut()
		}
	}
	return false
}

// cut reports whether the store ended l before the life it was asked for
// (leaseLife, less a millisecond for rounding).
func (l *quotaLease) cut() bool {
	return time.Duration(l.grant.Quota.End-l.grant.At)*time.Microsecond < leaseLife(&l.req)-time.Millisecond
}

// standing is what k's live leases of r's limit hold at now: their units
// not yet used, and their latest end. A grant asks for what the demand
// needs in a lease's life beyond those units: they are used first (the
// earliest-ending lease serves first), so a renewal sized for a whole
// life would leave what they hold unused at its end (a renewal due an
// eighth of a life early: an eighth of every lease), and a zone beside
// one whose leases are short (a token_bucket's slot) would gather a
// lease's worth at each of that zone's grants.
func (k *quotaKey) standing(now time.Time, r *algorithms.Request) (left int64, last time.Time) {
	for _, l := range k.leases {
		if now.Before(l.end) && l.req.Limit == r.Limit {
			left += l.units - l.used
			if l.end.After(last) {
				last = l.end
			}
		}
	}
	return left, last
}

// markRenewing marks every key of a request (their shards locked) as
// renewing, unless one already is: one renewal in flight per key.
func markRenewing(keys []*quotaKey) bool {
	for _, k := range keys {
		if k.renewing {
			return false
		}
	}
	for _, k := range keys {
		k.renewing = true
	}
	return true
}

// renew sends, in the background, one grant-only call for reqs (cost 0,
// leases of asks), installs its grants as new leases, and then clears the
// keys' renewing marks.
func (q *Leases) renew(reqs []algorithms.Request, asks []int64) {
	sent := q.asking(reqs, asks, true)
	if !q.background(func(ctx context.Context) {
		_, _ = q.grant(ctx, sent)
		q.doneRenewing(sent)
	}) {
		q.doneRenewing(sent)
	}
}

// doneRenewing clears the renewing marks of reqs' keys.
func (q *Leases) doneRenewing(reqs []algorithms.Request) {
	for i := range reqs {
		sh := &q.shards[q.shardOf(reqs[i].Key)]
		sh.mu.Lock()
		if k := sh.find(reqs[i].Key); k != nil {
			k.renewing = false
		}
		sh.mu.Unlock()
	}
}

// hold installs lease l among its key's, earliest ending first, unless a
// Forget of its key's shard came since the grant was asked or q is closed; it
// reports whether it did, and then r as its key's leases answer it at now
// (quotaKey.remaining, steady), l's units included.
func (q *Leases) hold(l *quotaLease, now time.Time) (held bool, remaining int64) {
	sh := &q.shards[q.shardOf(l.req.Key)]
	sh.mu.Lock()
	if sh.resets.Load() != l.resets || q.closed.Load() { // under the lock: Forget counts, then takes it
		sh.mu.Unlock()
		return false, 0
	}
	k, dropped := sh.findOrAdd(l.req.Key, nil)
	i, _ := slices.BinarySearchFunc(k.leases, l, func(a, b *quotaLease) int { return a.end.Compare(b.end) })
	sh.setLeases(k, slices.Insert(k.leases, i, l))
	if k.latest == nil || !k.latest.after(l) {
		k.latest, k.taken = l, 0
	}
	left, _ := k.standing(now, &l.req)
	d := l.grant
	d.Remaining = k.remaining(l, left)
	remaining = k.steady(d, l.req.Limit).Remaining
	sh.mu.Unlock()
	q.held.Add(1 - int64(len(dropped)))
	q.giveBack(dropped)
	q.startSweep()
	return true, remaining
}

// giveBack gives back the unused units of leases, no longer held, by one
// Settle in the background (in this goroutine once q is closed), never
// retried. A lease whose give-back the store would surely refuse (its
// clock past the lease's end, or past end + quota_lease for all but
// token_bucket) is not sent: its units expire.
func (q *Leases) giveBack(leases []*quotaLease) {
	now := q.now()
	var ss []algorithms.Settlement
	for _, l := range leases {
		unused := l.units - l.used
		switch {
		case unused <= 0:
		case l.refusedAt(now):
			q.observe(l.req.Key, LeaseExpired, unused)
		default:
			ss = append(ss, algorithms.GiveBack(l.req, l.grant, unused))
		}
	}
	if len(ss) == 0 {
		return
	}
	send := func(ctx context.Context) {
		if !q.reported {
			for _, s := range ss {
				q.observe(s.Key, LeaseReturned, -s.Delta)
			}
		}
		_ = q.next.Settle(ctx, ss)
	}
	if !q.background(send) {
		ctx, cancel := context.WithTimeout(context.Background(), quotaCallTimeout)
		defer cancel()
		send(ctx)
	}
}

// refusedAt reports whether the store would surely refuse l's give-back
// sent at now: the least its clock can read then (the grant's time, plus
// the time since the answer) is at or past the first moment it refuses
// one (LeaseRules.GiveBackEnd).
func (l *quotaLease) refusedAt(now time.Time) bool {
	rules, _ := algorithms.LeaseRulesOf(l.req.Limit.Algorithm)
	end := rules.GiveBackEnd(l.grant.Quota, l.req.Quota.For)
	return l.grant.At+storeElapsed(now.Sub(l.answered)).Microseconds() >= end
}

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

// startSweep starts the background sweep unless it runs (or q sweeps
// only when told, on a clock of its own): it runs while leases are held.
func (q *Leases) startSweep() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.autoSweep || q.sweeping || q.closed.Load() {
		return
	}
	q.sweeping = true
	q.sweeper.Add(1)
	go q.sweepLoop()
}

// sweepLoop ends leases as their time passes, until none is held or q
// closes.
func (q *Leases) sweepLoop() {
	defer q.sweeper.Done()
	timer := time.NewTimer(quotaSweepMin)
	defer timer.Stop()
	for {
		select {
		case <-q.stop:
			return
		case <-timer.C:
		}
		next := q.Sweep()
		q.mu.Lock()
		if q.held.Load() == 0 || q.closed.Load() {
			q.sweeping = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		timer.Reset(min(max(next.Sub(q.now()), quotaSweepMin), quotaSweepMax))
	}
}

// Sweep ends the leases whose time has passed, gives back their unused
// units, and returns the earliest end of those left (zero: none). The
// background sweep calls it; with a clock of its own (NewLeasesOf),
// the caller does.
func (q *Leases) Sweep() time.Time {
	now := q.now()
	var ended []*quotaLease
	var next time.Time
	for s := range q.shards {
		sh := &q.shards[s]
		sh.mu.Lock()
		for j := 0; j < len(sh.held); {
			k := &sh.slots[sh.held[j]]
			kept := k.leases[:0]
			for _, l := range k.leases {
				if now.Before(l.end) {
					kept = append(kept, l)
					if next.IsZero() || l.end.Before(next) {
						next = l.end
					}
				} else {
					ended = append(ended, l)
				}
			}
			clear(k.leases[len(kept):])
			sh.setLeases(k, kept)
			if len(kept) > 0 {
				j++
			} // else its place in held went to the last
		}
		sh.mu.Unlock()
	}
	q.held.Add(-int64(len(ended)))
	q.giveBack(ended)
	return next
}

// Forget drops the leases held of key, without giving them back (their
// key was reset or its override changed: the store's generation has moved
// on), and keeps the grants then in flight from being held. Called with
// each key the reset channel announces, beside the deny cache's Forget.
func (q *Leases) Forget(key string) {
	sh := &q.shards[q.shardOf(key)]
	sh.resets.Add(1) // only its shard's grants in flight: another key's reset spares the rest
	sh.mu.Lock()
	var dropped []*quotaLease
	if k := sh.find(key); k != nil {
		dropped = append(dropped, k.leases...)
		sh.setLeases(k, nil)
		k.latest, k.shown, k.shownUntil = nil, 0, 0 // its state and limit changed: r starts over
	}
	sh.mu.Unlock()
	q.expire(dropped)
}

// ForgetAll drops every lease held, as Forget does for one key: for
// resets that may have been missed (a reset subscription that was down).
func (q *Leases) ForgetAll() {
	for s := range q.shards {
		q.shards[s].resets.Add(1)
	}
	q.expire(q.takeAll())
}

// GiveBack gives back the leases held of the keys that start with prefix
// (a zone's, when the config that declared it is unloaded), as their end
// would: by one Settle in the background; a grant then in flight goes
// back too, as after a Forget (of any key: it is rare). A request of
// those keys that took units before keeps them; later ones lease again
// as their demand asks.
func (q *Leases) GiveBack(prefix string) {
	var back []*quotaLease
	for s := range q.shards {
		sh := &q.shards[s]
		sh.resets.Add(1)
		sh.mu.Lock()
		for j := 0; j < len(sh.held); {
			k := &sh.slots[sh.held[j]]
			if !strings.HasPrefix(k.key, prefix) {
				j++
				continue
			}
			back = append(back, k.leases...)
			sh.setLeases(k, nil) // its place in held goes to the last
		}
		sh.mu.Unlock()
	}
	q.held.Add(-int64(len(back)))
	q.giveBack(back)
}

// takeAll takes every lease held out of q.
func (q *Leases) takeAll() []*quotaLease {
	var all []*quotaLease
	for s := range q.shards {
		sh := &q.shards[s]
		sh.mu.Lock()
		for _, i := range sh.held {
			k := &sh.slots[i]
			all = append(all, k.leases...)
			k.leases, k.latest, k.heldAt = nil, nil, -1
		}
		sh.held = sh.held[:0]
		sh.mu.Unlock()
	}
	return all
}

// expire counts dropped leases no longer held, their unused units not
// given back.
func (q *Leases) expire(dropped []*quotaLease) {
	q.held.Add(-int64(len(dropped)))
	for _, l := range dropped {
		if unused := l.units - l.used; unused > 0 {
			q.observe(l.req.Key, LeaseExpired, unused)
		}
	}
}

// Close gives back every lease held (a reload or a stop), by one Settle,
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

// WaitCalls waits for the background calls in flight (renewals,
// give-backs, and those they start) to end. A replay on a clock of its own
// (NewLeasesOf) calls it before moving its clock on, so that each
// call happens at the time it was started.
func (q *Leases) WaitCalls() { q.calls.Wait() }

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

// Interface guards
var _ algorithms.Store = (*Leases)(nil)
