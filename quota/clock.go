package quota

import (
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// A lease's life on this instance's clock: the store's clock ends a lease
// (its grant's time g and end e), read on the monotonic clock with a
// bound on the drift between them and a margin, and a lease too short to
// outlive that and the round trips that carry it is neither asked for nor
// held.

// Between the monotonic clock and the store's: the store's may run
// 1/quotaDriftInverse (10⁻³) faster or slower; a lease stops quotaMargin
// before its end as the store's clock could have it.
const (
	quotaDriftInverse = 1000
	quotaMargin       = time.Millisecond
)

// Bounds on the sweep's sleep (sweep.go), which a lease's margins allow
// for: it wakes at the earliest lease end, but no sooner than
// quotaSweepMin after its last round (bounding its work under many
// leases) and no later than quotaSweepMax.
const (
	quotaSweepMin = 5 * time.Millisecond
	quotaSweepMax = 100 * time.Millisecond
)

// slower is d / (1 + 10⁻³) rounded down: the least the store's clock can
// advance while the local one advances d ≥ 0 (d − ⌈d/1001⌉, exact and
// without overflow).
func slower(d time.Duration) time.Duration {
	return d - (d+quotaDriftInverse)/(quotaDriftInverse+1)
}

// storeElapsed is the least the store's clock can have advanced while the
// local one advanced d, in whole µs (0 for d ≤ 0).
func storeElapsed(d time.Duration) time.Duration {
	return slower(max(0, d)).Truncate(time.Microsecond)
}

// leaseEnd is when a lease of store duration e − g, sent at sent, stops
// being used on the monotonic clock: sent + (e − g)/(1 + 10⁻³) −
// quotaMargin, rounded early.
func leaseEnd(sent time.Time, g, e int64) time.Time {
	return sent.Add(slower(max(0, time.Duration(e-g)*time.Microsecond)) - quotaMargin)
}

// heldUntil is when this holder stops using a lease granted in d to a
// request of algorithm alg sent at s and answered at a: its end on the
// monotonic clock (leaseEnd), less its early end (earlyEnd).
func heldUntil(alg algorithms.Algorithm, d algorithms.Decision, s, a time.Time) time.Time {
	rules, _ := algorithms.LeaseRulesOf(alg)
	return leaseEnd(s, d.At, d.Quota.End).Add(-earlyEnd(rules, a.Sub(s)))
}

// earlyEnd is how much sooner than its end this holder stops using a
// lease of rules: for one taken at its end (LeaseRules.TakenAtEnd:
// token_bucket), whose give-back counts only before that end, a round
// trip (rtt) and a sweep's least pause, so that one sent at the next
// sweep still lands; 0 for any other.
func earlyEnd(rules algorithms.LeaseRules, rtt time.Duration) time.Duration {
	if !rules.TakenAtEnd() {
		return 0
	}
	return rtt + quotaSweepMin
}

// measured stores the round trip of a call to next sent at s and
// answered at a, unless it failed (a timeout is no round trip).
func (q *Leases) measured(s, a time.Time, err error) {
	if err == nil {
		q.rtt.Store(int64(max(0, a.Sub(s))))
	}
}

// shortestLease is the shortest lease worth asking r's store for: one
// that still serves for two round trips once this holder has taken off
// its margin against the store's clock (quotaMargin, and the drift) and,
// for a lease taken at its end, its early end (earlyEnd). A shorter grant
// would be given back as soon as it is answered.
func (q *Leases) shortestLease(r *algorithms.Request) time.Duration {
	rules, _ := algorithms.LeaseRulesOf(r.Limit.Algorithm)
	return q.shortestOf(rules)
}

func (q *Leases) shortestOf(rules algorithms.LeaseRules) time.Duration {
	rtt := time.Duration(q.rtt.Load())
	d := 2*rtt + quotaMargin + earlyEnd(rules, rtt)
	return d + d/quotaDriftInverse + time.Microsecond
}

// worthAsking reports whether r's store could grant a lease worth having:
// its quota_lease and its algorithm's longest lease under its limit are
// no shorter than shortestLease, nor than minWorthLease. A key whose
// leases are all too short (a token_bucket's slot of a few ms, over a
// slow link; a sliding_log of a 100 ms window, whose leases last 2 ms) is
// decided as a cold one, not sent asking for what would never come or
// would go back as soon as it came.
func (q *Leases) worthAsking(r *algorithms.Request) bool {
	rules, ok := algorithms.LeaseRulesOf(r.Limit.Algorithm)
	return ok && leaseLife(r) >= max(q.shortestOf(rules), minWorthLease)
}

// minWorthLease is the shortest lease life worth asking for, whatever
// the round trip: a lease of less is mostly its margins (quotaMargin, a
// sweep's pause), and serves too few requests for its grant and
// give-back (a sliding_log of 10,000 per 100 ms, 2 ms leases: 0.3% of
// the units leased were used, at three times the Redis CPU of quota_lease
// off).
const minWorthLease = 10 * time.Millisecond

// leaseLife is the longest a lease of r can serve: its quota_lease, or its
// algorithm's longest lease under its limit when that is shorter (a
// token_bucket's slot, a twentieth of its window). Asks are sized for it:
// units leased beyond what a lease can use in its life would only be
// taken from the other instances until it ends.
func leaseLife(r *algorithms.Request) time.Duration {
	if rules, ok := algorithms.LeaseRulesOf(r.Limit.Algorithm); ok {
		return min(r.Quota.For, rules.Longest(r.Limit))
	}
	return r.Quota.For
}
