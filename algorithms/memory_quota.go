package algorithms

import (
	"maps"
	"time"
)

// The memory store's quota leases: the Go twin of what the decide code
// does on Redis (quota_lease.go says what a lease is). Only zones with
// ReadsLeases read or write a key's lease bookkeeping (quotaMeta, in
// memory_quota_meta.go); every other decision pays one branch for it.

// planGrants is the grant of each of reqs, admitted and about to be
// committed at now with verdicts, or nil when none is granted: every zone
// must lease (For > 0), ask (Units > 0) and enforce (not DryRun), and get
// at least 2 units, at most (remaining after its cost) / (2 × holders),
// for at least its Min (all or nothing).
func (m *MemoryStore) planGrants(plans []quotaPlan, now int64, reqs []Request, hashes []uint64, verdicts []verdict) []quotaPlan {
	for i, r := range reqs {
		if !r.ReadsLeases() || r.Quota.Units <= 0 || r.DryRun || leaseOf(r.Limit.Algorithm) == nil {
			return nil
		}
		forUs := r.Quota.For.Microseconds()
		holders, takers := int64(1), int64(1)
		if q := m.shard(hashes[i]).quota.get(r.Key, now); q != nil {
			holders, takers = q.holdersAt(now, forUs, r.Quota.Holder), q.takersAt(now, forUs, r.Quota.Holder)
		}
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
func (m *MemoryStore) commitGrants(ds []Decision, now int64, reqs []Request, hashes []uint64, plans []quotaPlan, taken bool) {
	for i, r := range reqs {
		if !r.ReadsLeases() {
			continue
		}
		qs := &m.shard(hashes[i]).quota
		if plans == nil {
			if q := qs.get(r.Key, now); q != nil {
				ds[i].Quota = q.report(now, r)
				if forUs := r.Quota.For.Microseconds(); taken && q.holders[r.Quota.Holder] <= now-forUs && q.takers[r.Quota.Holder] <= now-forUs {
					q.took(r.Quota.Holder, now)
				}
			}
			continue
		}
		p, forUs := plans[i], r.Quota.For.Microseconds()
		q := qs.take(r.Key, now)
		if q.g == 0 { // a first grant, as the scripts' (above a lost store's generations)
			q.g = now
		}
		q.n++
		maps.DeleteFunc(q.grants, func(_ int64, g grantUnits) bool { return g.end <= now })
		if q.grants == nil {
			q.grants = make(map[int64]grantUnits, 1)
		}
		q.grants[q.n] = grantUnits{units: p.units, end: p.end}
		q.e = max(q.e, p.end)
		q.l, q.b = r.Limit.Events, r.Limit.Capacity()
		q.hold(r.Quota.Holder, p.end, now, forUs)
		q.expires = max(q.expires, q.e+forUs+quotaMetaAfter.Microseconds()) // a reset's may be longer
		ds[i].Quota = QuotaGrant{Units: p.units, End: p.end, Generation: q.g, ID: q.n, Out: q.out(now), Takers: p.takers}
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
func (m *MemoryStore) tripsWithLeases(r Request, hash uint64, remaining, now int64) bool {
	var out int64
	if q := m.shard(hash).quota.get(r.Key, now); q != nil {
		out = q.out(now)
	}
	return remaining+out < r.Cost
}
