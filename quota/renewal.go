package quota

import (
	"context"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// Renewals: a key's leases are renewed by one grant-only call in the
// background before they run out, of units or of time.

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
		q.answered(sent)
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
