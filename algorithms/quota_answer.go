package algorithms

import "time"

// What a decision taken from quota leases says: the grant's answer, its
// remaining as the key's leases stand, and its times counted down.

// after reports whether l's grant came after o's: at a later time of the
// store's clock, or in the same microsecond with a later grant number.
func (l *quotaLease) after(o *quotaLease) bool {
	return l.grant.At > o.grant.At || l.grant.At == o.grant.At && l.grant.Quota.ID > o.grant.Quota.ID
}

// remaining is the Remaining k's leases answer, with l one of them: the
// store's remaining at k's latest grant (else at l's) plus unused, the
// units of l's limit's live leases not yet used. The latest grant's
// remaining already counts every earlier grant out, whatever order their
// answers came back in; when it was under another limit it is still the
// store's word for l's: while leases of two limits are out, the store
// decides the key with the smaller (one limit per lease), and its latest
// grant's remaining is under that one.
func (k *quotaKey) remaining(l *quotaLease, unused int64) int64 {
	latest := l
	if k.latest != nil && k.latest.after(l) {
		latest = k.latest
	}
	return latest.grant.Remaining + unused
}

// answer is the decision taken from l at now: the grant's, with
// Remaining as k's leases answer it (remaining), and the times counted
// down by the time since l's grant, as the store's clock measured it at
// least (so that t is never early).
func (q *QuotaLeases) answer(now time.Time, l *quotaLease, k *quotaKey, unused int64) Decision {
	elapsed := storeElapsed(now.Sub(l.answered))
	return Decision{
		Allowed:    true,
		Leased:     true,
		Remaining:  k.remaining(l, unused),
		ResetAfter: max(0, l.grant.ResetAfter-elapsed),
		MoreAfter:  max(0, l.grant.MoreAfter-elapsed),
		At:         l.grant.At + elapsed.Microseconds(),
		Override:   l.grant.Override,
		Quota:      l.grant.Quota,
	}
}
