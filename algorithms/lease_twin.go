package algorithms

// What an algorithm's Go twin provides for quota leases (leaseTwin, an
// entry of the table) and the grant it fills in (quotaPlan).

import "time"

// leaseTwin is one algorithm's quota leases (quota_lease.go), the twin of
// its script's lease_end, grant, lease_taken_at_end and lease_at_end
// (quota_lease.lua). end and grant are run by a memory store that lends
// (memory_quota.go); longest and takenAtEnd are read by every store's
// lease holder (package quota) too, as LeaseRules (lease_rules.go).
type leaseTwin struct {
	// end is when a lease of units granted at in.now ends: at the latest
	// last (now + quota_lease), and no later than its units count as used;
	// next is the key's state once the request's cost is taken.
	end func(next state, in input, last, units int64) int64
	// longest is the longest a lease under l can last, quota_lease aside:
	// a holder asks for none when it is shorter than one worth having,
	// which the store would never grant (LeaseRules.Longest).
	longest func(l Limit) time.Duration
	// grant is next with p's units counted as used at any moment until
	// p.end. It may set p's remaining (else what remained less the
	// units), and p's reset and more when the units change them.
	grant func(next state, in input, p *quotaPlan) state
	// takenAtEnd: the units are taken as if at the lease's end, so a
	// give-back counts only before that end and only of the key's latest
	// grant (else before the end + quota_lease, of any grant); a holder
	// ends such a lease early enough for its give-back to land.
	takenAtEnd bool
	// atEnd: the lease's units are stamped with its end, so a give-back
	// settles at the end instead of the grant's time.
	atEnd bool
	// steady: what a key has left only falls within a window (nothing
	// refills it), so a holder's answers keep r from rising there either
	// (LeaseRules.Steady).
	steady bool
}

// quotaPlan is one zone's grant, before it is committed; remaining is
// what its key has left once it is, and reset and more (µs, 0: as after
// the request) when the grant changes them (withGrant sets them).
type quotaPlan struct {
	units, end, remaining int64
	takers                int64 // the key's recent takers, the asker included
	reset, more           int64
}
