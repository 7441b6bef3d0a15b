package algorithms

import "time"

// The memory store's quota leases: the Go twin of what the decide code
// does on Redis (quota_lease.go says what a lease is), by each
// algorithm's lease twin (lease_twin.go), over the store's LeaseBook.
// Only a store that lends (a book) and zones with ReadsLeases read or
// write a key's lease bookkeeping; every other decision pays one branch
// for it.

// lends reports whether m decides r's quota leases: it lends (has a
// book) and r's zone reads them.
func (m *MemoryStore) lends(r Request) bool { return m.book != nil && r.ReadsLeases() }

// planGrants is the grant of each of reqs, admitted and about to be
// committed at now with verdicts, or nil when none is granted: every zone
// must lease (For > 0), ask (Units > 0) and enforce (not DryRun), and get
// at least 2 units, at most (remaining after its cost) / (2 × holders),
// for at least its Min (all or nothing).
func (m *MemoryStore) planGrants(plans []quotaPlan, now int64, reqs []Request, verdicts []verdict) []quotaPlan {
	for i, r := range reqs {
		if !m.lends(r) || r.Quota.Units <= 0 || r.DryRun || leaseOf(r.Limit.Algorithm) == nil {
			return nil
		}
		holders, takers := m.book.Sharers(r, now)
		units := int64(0)
		if rem := verdicts[i].remaining - r.Cost; rem > 0 {
			units = min(r.Quota.Units, rem/(2*holders))
		}
		end := grantEnd(verdicts[i].next, r, now, units)
		if x := m.overrideEnd(r.Key, now); x > 0 {
			end = min(end, x) // a lease never outlives the override it is granted under
		}
		if units < 2 || end-now < r.Quota.Min.Microseconds() {
			return nil
		}
		plans = append(plans, quotaPlan{units: units, end: end, takers: takers})
	}
	return plans
}

// grantEnd is when a lease of units of r granted at now ends, next being
// r's state once its cost is taken: no later than now + For, nor than its
// algorithm's lease twin allows (leaseTwin.end).
func grantEnd(next state, r Request, now, units int64) int64 {
	return leaseOf(r.Limit.Algorithm).end(next, inputFor(r, now), now+r.Quota.For.Microseconds(), units)
}

// withGrant is next, r's state once its cost is taken at now, with p's
// units counted as used at any moment until p's end (leaseTwin.grant),
// and sets p's remaining.
func withGrant(next state, r Request, p *quotaPlan, remaining, now int64) state {
	next.held = true
	p.remaining = remaining - p.units
	return leaseOf(r.Limit.Algorithm).grant(next, inputFor(r, now), p)
}

// commitGrants records each granted zone's lease in its key's
// bookkeeping and reports it in its decision; without grants (plans nil),
// each leasing zone's decision reports its key's units out, and when it
// was taken (consumed), its holder as one that recently took.
func (m *MemoryStore) commitGrants(ds []Decision, now int64, reqs []Request, plans []quotaPlan, taken bool) {
	for i, r := range reqs {
		if !m.lends(r) {
			continue
		}
		if plans == nil {
			if g, ok := m.book.Report(r, now, taken); ok {
				ds[i].Quota = g
			}
			continue
		}
		p := plans[i]
		g := m.book.Grant(r, p.units, p.end, now)
		g.Units, g.End, g.Takers = p.units, p.end, p.takers
		ds[i].Quota = g
		ds[i].Remaining = p.remaining
		if p.reset > 0 {
			ds[i].ResetAfter = max(ds[i].ResetAfter, time.Duration(p.reset)*time.Microsecond)
		}
		if p.more > 0 {
			ds[i].MoreAfter = time.Duration(p.more) * time.Microsecond
		}
	}
}

// tripsWithLeases reports whether r's zone, denied at now with remaining
// before its cost, trips its ban: only if it would be denied with its
// key's units out counted as free.
func (m *MemoryStore) tripsWithLeases(r Request, remaining, now int64) bool {
	return remaining+m.book.Out(r.Key, now) < r.Cost
}
