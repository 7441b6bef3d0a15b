package algorithms

import "time"

// What a quota lease holder (package quota) reads of this package beyond
// the lease's vocabulary (quota_lease.go) and its give-back (giveback.go):
// each algorithm's lease rules.

// LeaseRules are an algorithm's quota lease rules as a lease holder reads
// them: those of its lease twin (leaseTwin), which its Lua mirrors. The
// zero LeaseRules are those of an algorithm that does not lease.
type LeaseRules struct{ twin *leaseTwin }

// LeaseRulesOf is a's lease rules, and whether a leases (false for an
// unknown name too).
func LeaseRulesOf(a Algorithm) (LeaseRules, bool) {
	l := leaseOf(a)
	return LeaseRules{l}, l != nil
}

// Longest is the longest a lease under l can last, quota_lease aside (0
// when the algorithm does not lease): a window, a slot, a sliding_log's
// short lease. A holder asks for none when it is shorter than one worth
// having, which the store would never grant.
func (r LeaseRules) Longest(l Limit) time.Duration {
	if r.twin == nil {
		return 0
	}
	return r.twin.longest(l)
}

// TakenAtEnd reports whether a lease's units are taken as if at its end
// (token_bucket): a give-back counts only before that end and of the
// key's latest grant, so a holder stops using such a lease early enough
// for its give-back to land.
func (r LeaseRules) TakenAtEnd() bool { return r.twin != nil && r.twin.takenAtEnd }

// Steady reports whether what a key has left only falls within a window
// (fixed_window, a calendar period): a holder's answers keep r from
// rising within it too, though give-backs raise its estimate.
func (r LeaseRules) Steady() bool { return r.twin != nil && r.twin.steady }

// GiveBackEnd is the first moment (µs of the store's clock) the store
// refuses a give-back of grant g made to a zone of quota_lease leaseFor:
// g's end for a lease taken at its end (TakenAtEnd), else its end plus
// leaseFor plus QuotaGiveBackGrace. A holder sends none it knows too late.
func (r LeaseRules) GiveBackEnd(g QuotaGrant, leaseFor time.Duration) int64 {
	if r.TakenAtEnd() {
		return g.End
	}
	return g.End + (leaseFor + QuotaGiveBackGrace).Microseconds()
}
