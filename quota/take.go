package quota

import (
	"slices"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// Deciding a request from held leases, under its keys' shard locks: take
// each zone's cost from a live lease (all or none), plan the asks
// (plan.go), and answer from the leases (answer.go).

// decide is take's decision with what follows it: the leases it dropped
// given back, the units used counted, a renewal started when due; asks
// (on the stack for up to maxStackZones zones) are the store call's when
// not admitted.
func (q *Leases) decide(reqs []algorithms.Request, asks []int64, leasedOnly bool) ([]algorithms.Decision, []int64) {
	if len(reqs) > cap(asks) {
		asks = make([]int64, 0, len(reqs))
	}
	ds, asks, renew, dropped := q.take(reqs, asks, leasedOnly)
	if len(dropped) > 0 {
		q.held.Add(-int64(len(dropped)))
		q.giveBack(dropped)
	}
	if ds == nil {
		return nil, asks
	}
	for i := range reqs {
		q.observe(reqs[i].Key, LeaseUsed, reqs[i].Cost)
	}
	if renew {
		q.renew(reqs, asks)
	}
	return ds, asks
}

// take decides reqs from their leases under their shards' locks, in
// three steps: take from the leases (takeFromLeases, rolled back unless
// every zone had one), plan the asks (plan: the demand recorded, the
// sizes of a renewal or of the store call's grant, none for a cold key),
// and, admitted, build the answers (answers). Admitted, it returns the
// decisions, and whether a renewal is due, with asks its sizes; else nil
// and the asks for the store call. asks is nil when no lease is asked
// (some zone would not use one). dropped are the leases of keys it
// stopped tracking to make room, to give back. leasedOnly: not admitted,
// it returns at once, having recorded nothing; and without reading the
// clock when some key is not tracked (it holds no lease), as a cold
// key's is not.
func (q *Leases) take(reqs []algorithms.Request, asks []int64, leasedOnly bool) (ds []algorithms.Decision, _ []int64, renew bool, dropped []*quotaLease) {
	var buf takingBuf
	t := buf.taking(len(reqs))
	t.hs, t.idx = q.lock(reqs, t.hs, t.idx)
	defer q.unlock(t.idx)
	t.keys = q.find(reqs, t.hs, t.keys)
	if leasedOnly && slices.Contains(t.keys, nil) {
		return nil, asks, false, nil
	}
	now := q.now() // the admission instant
	var admitted bool
	t.from, admitted = takeFromLeases(now, reqs, t.keys, t.from)
	if !admitted && leasedOnly {
		return nil, asks, false, nil
	}
	asks, renew, dropped = q.plan(now, reqs, t, admitted, asks)
	if !admitted {
		if asking(asks) { // the store call asks them (Allow): in flight until its answer
			q.asked(reqs, t.hs, asks)
		}
		return nil, asks, false, dropped
	}
	ds = q.answers(now, reqs, t)
	if renew = renew && markRenewing(t.keys); renew { // the renewal asks them (renew)
		q.asked(reqs, t.hs, asks)
	}
	return ds, asks, renew, dropped
}

// find appends each request's key (of hash hs[i]; nil: untracked) to
// keys.
func (q *Leases) find(reqs []algorithms.Request, hs []uint64, keys []*quotaKey) []*quotaKey {
	for i := range reqs {
		keys = append(keys, q.shards[q.shardIn(hs[i])].find(reqs[i].Key))
	}
	return keys
}

// takeFromLeases takes each request's cost from a live lease of its key
// (keys[i], find's) and reports whether every one had one; if not, what
// was taken goes back. It appends the leases taken from to from.
func takeFromLeases(now time.Time, reqs []algorithms.Request, keys []*quotaKey, from []*quotaLease) ([]*quotaLease, bool) {
	for i := range reqs {
		l := keys[i].takeFrom(now, &reqs[i])
		if l == nil {
			break
		}
		from = append(from, l)
	}
	if len(from) == len(reqs) {
		return from, true
	}
	for i, l := range from {
		l.used -= reqs[i].Cost
		keys[i].taken -= reqs[i].Cost
	}
	return from, false
}

// takeFrom takes r's cost from the earliest-ending live lease of k (r's
// key; nil: untracked) that has enough left, and returns it (nil: none).
func (k *quotaKey) takeFrom(now time.Time, r *algorithms.Request) *quotaLease {
	if k == nil {
		return nil
	}
	for _, l := range k.leases {
		if l.live(now, r) {
			l.used += r.Cost
			k.taken += r.Cost
			return l
		}
	}
	return nil
}

// answers is the decision of each request admitted from its lease (t.from)
// at now (Leases.answer); a lease spent goes.
func (q *Leases) answers(now time.Time, reqs []algorithms.Request, t taking) []algorithms.Decision {
	ds := make([]algorithms.Decision, len(reqs))
	for i, l := range t.from {
		ds[i] = q.answer(now, l, t.keys[i], t.left[i])
	}
	for i, l := range t.from {
		if l.used >= l.units && q.shards[q.shardIn(t.hs[i])].remove(t.keys[i], l) { // spent: nothing to give back
			q.held.Add(-1)
		}
	}
	return ds
}
