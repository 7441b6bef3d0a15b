package quota

import (
	"context"
	"slices"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// The store call: what it asks (plan's asks, the shortest lease worth
// having, this holder's name), and the grants of its answer held as
// leases (all of a request's zones, or none).

// The asks of a store call that asks no lease: askNone, the store counts
// this holder as a taker of the key (the key's holders' answers allow for
// it); askUntracked (QuotaAsk.Untracked), for a key this instance does
// not track (seenEnough) or whose zone can lease nothing worth having
// (worthAsking): the store decides it as without leases and reads no
// lease bookkeeping, so a cold key costs Redis what it costs with
// quota_lease off.
const (
	askNone      int64 = 0
	askUntracked int64 = -1
)

// asking reports whether asks ask every zone a lease.
func asking(asks []int64) bool {
	for _, a := range asks {
		if a <= 0 {
			return false
		}
	}
	return len(asks) > 0
}

// ask sends reqs to the next store, with asks (plan), and installs the
// grants its answer carries.
func (q *Leases) ask(ctx context.Context, reqs []algorithms.Request, asks []int64) ([]algorithms.Decision, error) {
	var ds []algorithms.Decision
	var err error
	if asking(asks) {
		ds, err = q.grant(ctx, q.asking(reqs, asks, false))
	} else {
		s := q.now()
		ds, err = q.askingNone(ctx, reqs, asks)
		q.measured(s, q.now(), err) // a key asking none (worthAsking) still measures the round trip
	}
	for i := range ds {
		switch {
		case ds[i].Banned || ds[i].BanStarted: // the reset channel tells every holder, this one too, but later: Take would admit until then
			q.Forget(reqs[i].Key)
		case ds[i].Quota.Takers > 0: // a key with lease bookkeeping: give-backs may raise the store's word
			ds[i] = q.steady(ds[i], &reqs[i])
		}
	}
	return ds, err
}

// askingNone sends reqs to the next store asking no lease, each zone
// named by this holder, and Untracked when its ask is askUntracked.
func (q *Leases) askingNone(ctx context.Context, reqs []algorithms.Request, asks []int64) ([]algorithms.Decision, error) {
	for i := range reqs {
		reqs[i].Quota.Holder, reqs[i].Quota.Untracked = q.holder, asks[i] == askUntracked
	}
	return q.next.Allow(ctx, reqs)
}

// asking is a copy of reqs asking for leases of asks units, none shorter
// than this holder can use (shortestLease); grantOnly: of cost 0 (a
// renewal).
func (q *Leases) asking(reqs []algorithms.Request, asks []int64, grantOnly bool) []algorithms.Request {
	sent := slices.Clone(reqs)
	for i := range sent {
		sent[i].Quota.Units = asks[i]
		sent[i].Quota.Min = q.shortestLease(&sent[i])
		sent[i].Quota.Holder, sent[i].Quota.Untracked = q.holder, false
		if grantOnly {
			sent[i].Cost = 0
		}
	}
	return sent
}

// grant sends sent, asking for leases, and installs the grants of the
// answer. Its asks stay in flight (quotaKey.inFlight) until the grants
// are installed, or the call failed or panicked, so a concurrent ask
// counts them, held or in flight.
func (q *Leases) grant(ctx context.Context, sent []algorithms.Request) ([]algorithms.Decision, error) {
	defer q.answered(sent)
	resets := make([]uint64, len(sent)) // of each key's shard: a grant asked before a Forget of its key is not held
	for i := range sent {
		resets[i] = q.shards[q.shardOf(sent[i].Key)].resets.Load()
	}
	s := q.now()
	ds, err := q.next.Allow(ctx, sent)
	a := q.now()
	q.measured(s, a, err)
	if err == nil && len(ds) == len(sent) {
		q.install(sent, ds, s, a, resets)
	}
	return ds, err
}

// install holds the grants of ds, answered at a to sent sent at s: all
// zones got one, or none is held (and those granted go back). All held,
// each decision's Remaining is r as its key's leases answer it
// (quotaKey.remaining). A lease shorter than two round trips, or over by
// the time of the answer, is not held either, nor one asked before a
// Forget or held after Close.
func (q *Leases) install(sent []algorithms.Request, ds []algorithms.Decision, s, a time.Time, resets []uint64) {
	granted := 0
	for i := range ds {
		if ds[i].Quota.Units > 0 {
			granted++
		}
	}
	if granted == 0 {
		return
	}
	leases := make([]*quotaLease, 0, granted)
	for i := range ds {
		if g := ds[i].Quota; g.Units > 0 {
			end := heldUntil(sent[i].Limit.Algorithm, ds[i], s, a)
			leases = append(leases, &quotaLease{req: sent[i], grant: ds[i], units: g.Units, answered: a, end: end, resets: resets[i]})
			q.observe(sent[i].Key, LeaseGranted, g.Units)
		}
	}
	rtt := a.Sub(s)
	if granted < len(ds) || !algorithms.Admitted(sent, ds) {
		q.giveBack(leases)
		return
	}
	var back []*quotaLease
	remaining := make([]int64, len(leases))
	for i, l := range leases {
		if time.Duration(l.grant.Quota.End-l.grant.At)*time.Microsecond < 2*rtt || !l.end.After(a) {
			back = append(back, l)
			continue
		}
		held, r := q.hold(l, a)
		if !held {
			back = append(back, l)
			continue
		}
		remaining[i] = r
	}
	q.giveBack(back)
	if len(back) > 0 { // the leases held cannot admit alone: r stays the store's
		return
	}
	for i := range ds {
		ds[i].Remaining = remaining[i] // r of the granting request: as from the leases it holds (answer)
	}
	if q.denials != nil {
		q.denials.Drop(sent) // its leases may admit it now
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
