package quota

import (
	"context"
	"strings"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// A lease's end: its unused units given back to the lender in one call,
// never retried (giveBack), or dropped without one when the store would
// refuse it or its key's generation moved on (Forget, expire).

// giveBack gives back the unused units of leases, no longer held, in one
// call to the lender in the background (in this goroutine once q is
// closed), never retried. A lease whose give-back the store would surely refuse (its
// clock past the lease's end, or past end + quota_lease for all but
// token_bucket) is not sent: its units expire.
func (q *Leases) giveBack(leases []*quotaLease) {
	now := q.now()
	var gbs []algorithms.GiveBack
	for _, l := range leases {
		unused := l.units - l.used
		switch {
		case unused <= 0:
		case l.refusedAt(now):
			q.observe(l.req.Key, LeaseExpired, unused)
		default:
			gbs = append(gbs, algorithms.GiveBackOf(l.req, l.grant, unused))
		}
	}
	if len(gbs) == 0 {
		return
	}
	send := func(ctx context.Context) {
		if !q.reported {
			for _, g := range gbs {
				q.observe(g.Key, LeaseReturned, g.Units)
			}
		}
		_ = q.lender.GiveBack(ctx, gbs)
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

// GiveBack gives back the leases held of the keys that start with prefix
// (a zone's, when the config that declared it is unloaded), as their end
// would: in one call in the background; a grant then in flight goes
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
