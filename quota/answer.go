package quota

import (
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// What a decision taken from quota leases says: the grant's answer, its
// remaining as the key's leases stand, and its times counted down.

// answer is the decision taken from l at now: the grant's, with
// Remaining as k's leases answer it (remaining, steady), and the times
// counted down by the time since l's grant, as the store's clock measured it at
// least (so that t is never early).
func (q *Leases) answer(now time.Time, l *quotaLease, k *quotaKey, unused int64) algorithms.Decision {
	elapsed := storeElapsed(now.Sub(l.answered))
	return k.steady(algorithms.Decision{
		Allowed:    true,
		Leased:     true,
		Remaining:  k.remaining(l, unused),
		ResetAfter: max(0, l.grant.ResetAfter-elapsed),
		MoreAfter:  max(0, l.grant.MoreAfter-elapsed),
		At:         l.grant.At + elapsed.Microseconds(),
		Override:   l.grant.Override,
		Quota:      l.grant.Quota,
	}, l.req.Limit)
}

// remaining is the Remaining k's leases answer, with l one of them
// (leasedRemaining of k's latest grant, else l's, and unused, the units
// of l's limit's live leases not yet used). The latest grant's remaining
// already counts every earlier grant out, whatever order their answers
// came back in; when it was under another limit it is still the store's
// word for l's: while leases of two limits are out, the store decides the
// key with the smaller (one limit per lease), and its latest grant's
// remaining is under that one.
func (k *quotaKey) remaining(l *quotaLease, unused int64) int64 {
	latest := l
	if k.latest != nil && k.latest.after(l) {
		latest = k.latest
	}
	g := latest.grant
	return leasedRemaining(g.Remaining, unused, k.taken, g.Quota.Takers, g.Override.Apply(latest.req.Limit).Capacity())
}

// after reports whether l's grant came after o's: at a later time of the
// store's clock, or in the same microsecond with a later grant number.
func (l *quotaLease) after(o *quotaLease) bool {
	return l.grant.At > o.grant.At || l.grant.At == o.grant.At && l.grant.Quota.ID > o.grant.Quota.ID
}

// leasedRemaining is the r of an answer from quota leases: the store's
// remaining at the key's latest grant, plus unused, this instance's
// leased units not yet used, less an allowance for what other instances
// take meanwhile when the store counted any (takers > 1): as much as
// this instance took since that grant (taken) per other taker, and a
// tenth of the capacity; at most all of the store's remaining.
//
// The truth is the capacity less the units admitted (unused leased units
// count as remaining). At the grant, the store's remaining is at most the
// truth less unused (it counts every lease's units as used), so alone on
// a key the answer is never above the truth; with others, it exceeds the
// truth only by what they took since the grant beyond the allowance:
// never while their demand is no more than this instance's plus a tenth
// of the capacity in a lease's life, and never once the store's remaining
// is all allowed for.
func leasedRemaining(store, unused, taken, takers, capacity int64) int64 {
	if takers > 1 {
		store -= min(max(store, 0), capacity/10+(takers-1)*taken)
	}
	return store + unused
}

// windowSlack is how far apart two answers' window ends (At +
// ResetAfter) may be and still be of one window: a leased answer's are
// rounded to the µs.
const windowSlack = time.Millisecond

// steady keeps d's Remaining, an answer for k of limit l, from rising
// within a window where the algorithm's own never does
// (LeaseRules.Steady: a fixed window or period) on this instance: give-backs, and the
// store's word at a later grant, may raise the estimate, while a client
// reads r as what is left of the window. It returns d, its Remaining at
// most the least this instance answered in d's window.
func (k *quotaKey) steady(d algorithms.Decision, l algorithms.Limit) algorithms.Decision {
	if rules, _ := algorithms.LeaseRulesOf(l.Algorithm); !rules.Steady() {
		return d
	}
	end := d.At + d.ResetAfter.Microseconds()
	switch {
	case abs(end-k.shownUntil) <= windowSlack.Microseconds():
		d.Remaining = min(d.Remaining, k.shown)
	case end < k.shownUntil: // an earlier window's answer, late: keep the window's
		return d
	}
	k.shown, k.shownUntil = d.Remaining, end
	return d
}

// steady is the store's decision d of r as this instance answers it:
// within a steady window (LeaseRules.Steady), no higher than what it answered before for r's
// key (quotaKey.steady), when that key is tracked. A key the store keeps
// no lease bookkeeping for (a cold one) has nothing given back to raise
// its count within a window, and is not looked up.
func (q *Leases) steady(d algorithms.Decision, r *algorithms.Request) algorithms.Decision {
	if rules, _ := algorithms.LeaseRulesOf(r.Limit.Algorithm); !rules.Steady() {
		return d
	}
	sh := &q.shards[q.shardOf(r.Key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if k := sh.find(r.Key); k != nil {
		d = k.steady(d, r.Limit)
	}
	return d
}

func abs(n int64) int64 { return max(n, -n) }
