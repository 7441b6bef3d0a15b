package algorithms

// A memory store's quota lease bookkeeping, key by key, as each shard
// holds it; the store grants and commits leases in memory_quota.go.

import (
	"maps"
	"slices"
	"time"
)

// quotaMeta is one key's lease bookkeeping, the twin of the hash at
// StateBase(key)+":q" on Redis.
type quotaMeta struct {
	g       int64                // the key's generation: Reset and overrides raise it
	e       int64                // the latest lease end (µs)
	l, b    int64                // events and capacity in force at the latest grant
	n       int64                // grants made: the latest grant's ID
	grants  map[int64]grantUnits // by ID, this generation's grants: their units out until their end
	holders map[string]int64     // each holder's latest lease end (µs)
	takers  map[string]int64     // when each instance last took without a lease (µs)
	// returned is, per holder, its grants given back whose give-back time
	// is not over: a give-back of one of them does nothing (sent twice),
	// one of any other grant lands in any order (a holder's give-backs
	// travel in separate calls)
	returned map[string][]givenBack
	expires  int64 // µs; the bookkeeping is gone from then on
}

// grantUnits is a grant's units not given back, out until its end (µs).
type grantUnits struct{ units, end int64 }

// givenBack is a grant given back: its ID, and the last µs a give-back
// of it lands (its lease's end + quota_lease + QuotaGiveBackGrace − 1).
type givenBack struct{ id, last int64 }

// quotaMetaAfter is how long a key's bookkeeping outlives its latest
// lease end beyond the zone's quota_lease: a give-back is applied only
// before its lease's end plus quota_lease plus QuotaGiveBackGrace, so the
// generation it names is kept at least that long.
const quotaMetaAfter = QuotaGiveBackGrace + time.Second

// quotaMetaAfterReset is the least a reset or an override keeps a key's
// bookkeeping: past the end + quota_lease of any lease granted before it
// (twice MaxQuotaLease), so that no give-back of such a lease finds a
// generation started anew (redisstore's quotaKeep).
const quotaMetaAfterReset = 2*MaxQuotaLease + QuotaGiveBackGrace + time.Second

// maxQuotaHolders bounds the holders a key's bookkeeping remembers: far
// more instances than a fleet runs, so the count of recent holders is
// exact in practice, and a key's bookkeeping stays bounded.
const maxQuotaHolders = 1024

// out is the units out at now: those of this generation's grants not yet
// ended.
func (q *quotaMeta) out(now int64) int64 {
	var out int64
	for _, g := range q.grants {
		if now < g.end {
			out += g.units
		}
	}
	return out
}

// holdersAt is how many instances recently held leases on the key: those
// whose latest lease ended after now − forUs, plus holder when it is not
// one of them. It is at least 1.
func (q *quotaMeta) holdersAt(now, forUs int64, holder string) int64 {
	var count int64
	among := false
	for h, end := range q.holders {
		if end > now-forUs {
			count++
			among = among || h == holder
		}
	}
	if !among {
		count++
	}
	return count
}

// takersAt is how many instances took from the key in the forUs before
// now, holder included: holdersAt, and those that took without a lease
// and are not among them (a taker's record is written again once forUs
// old, and counts for twice that: one taking all along stays counted).
func (q *quotaMeta) takersAt(now, forUs int64, holder string) int64 {
	n := q.holdersAt(now, forUs, holder)
	for t, last := range q.takers {
		if last > now-2*forUs && t != holder && q.holders[t] <= now-forUs {
			n++
		}
	}
	return n
}

// took records that holder took from the key at now without a lease,
// forgetting the takers no decision counts any more (the scripts' stale
// t<holder> fields).
func (q *quotaMeta) took(holder string, now int64) {
	if q.takers == nil {
		q.takers = make(map[string]int64, 1)
	}
	maps.DeleteFunc(q.takers, func(_ string, last int64) bool { return last <= now-MaxQuotaLease.Microseconds() })
	q.takers[holder] = now
}

// report is what a leasing zone's Decision.Quota of r says without a
// grant: the units out, with the latest end of the grants they are in,
// and the holders (none before a first grant).
func (q *quotaMeta) report(now int64, r Request) QuotaGrant {
	g := QuotaGrant{Generation: q.g, ID: q.n}
	if q.n > 0 {
		g.Takers = q.takersAt(now, r.Quota.For.Microseconds(), r.Quota.Holder)
	}
	for _, gu := range q.grants {
		if now < gu.end {
			g.Out += gu.units
			g.End = max(g.End, gu.end)
		}
	}
	return g
}

// quotaMetas are a shard's keys' bookkeeping, under the shard's lock, at
// most max of them (the shard's share of the store's keys).
type quotaMetas struct {
	byKey map[string]*quotaMeta
	max   int
}

// get is key's bookkeeping at now, or nil when it has none (or it
// expired).
func (qs *quotaMetas) get(key string, now int64) *quotaMeta {
	if q := qs.byKey[key]; q != nil && now < q.expires {
		return q
	}
	return nil
}

// take is key's bookkeeping at now, created (generation 0) when it has
// none; at the bound, room is made first (makeRoom).
func (qs *quotaMetas) take(key string, now int64) *quotaMeta {
	if q := qs.get(key, now); q != nil {
		return q
	}
	if qs.byKey == nil {
		qs.byKey = make(map[string]*quotaMeta)
	}
	if _, ok := qs.byKey[key]; !ok && len(qs.byKey) >= qs.max {
		qs.makeRoom(now)
	}
	q := &quotaMeta{}
	qs.byKey[key] = q
	return q
}

// makeRoom frees at least one key's bookkeeping (makeRoom): the store
// forgets keys past its bound the same way.
func (qs *quotaMetas) makeRoom(now int64) {
	makeRoom(qs.byKey, func(q *quotaMeta) bool { return q.expires <= now })
}

// newGeneration starts a new generation of key's bookkeeping at now (a
// reset, ended, or an override): no lease granted before it gives back
// after it; after a reset no units are out (the state that counted them
// is gone). It is kept at least quotaMetaAfterReset.
func (qs *quotaMetas) newGeneration(key string, now int64, ended bool) {
	q := qs.take(key, now)
	if q.g == 0 { // a new hash, as the Redis store's: above a lost store's generations
		q.g = now
	}
	q.g++
	clear(q.grants) // their holders drop them
	if ended {
		q.e = 0
	}
	q.expires = max(q.expires, now+quotaMetaAfterReset.Microseconds())
}

// leasedLimit is r's limit while its key has units out under a smaller
// one (one limit per lease): the smaller events and capacity; ok is
// false when r's own applies.
func (qs *quotaMetas) leasedLimit(r Request, now int64) (l Limit, ok bool) {
	q := qs.get(r.Key, now)
	if q == nil || now >= q.e || (q.l >= r.Limit.Events && q.b >= r.Limit.Capacity()) {
		return r.Limit, false
	}
	l = r.Limit
	capacity := l.Capacity() // before Events changes: a Burst of 0 is Events
	l.Events = min(l.Events, q.l)
	if l.Algorithm.Features().Burst {
		l.Burst = min(capacity, q.b)
	}
	return l, true
}

// hold sets holder's latest lease end, forgetting the holders no lease
// life (forUs, or the longest, MaxQuotaLease) counts any more, and past
// maxQuotaHolders the one whose lease ended first.
func (q *quotaMeta) hold(holder string, end, now, forUs int64) {
	if q.holders == nil {
		q.holders = make(map[string]int64, 1)
	}
	since := now - max(forUs, MaxQuotaLease.Microseconds())
	for h, e := range q.holders {
		if e <= since {
			delete(q.holders, h)
			delete(q.returned, h)
		}
	}
	q.holders[holder] = end
	if len(q.holders) > maxQuotaHolders {
		first, firstEnd := "", int64(0)
		for h, e := range q.holders {
			if h != holder && (first == "" || e < firstEnd) {
				first, firstEnd = h, e
			}
		}
		delete(q.holders, first)
		delete(q.returned, first)
	}
}

// acceptGiveBack reports whether give-back g applies at now, and if so
// counts its units back from the units out: the key's bookkeeping must
// still be of g's grant's generation, before its lease's end plus its
// quota_lease, and for an algorithm whose leases are taken at their end
// (token_bucket) before its lease's end, with no later grant; and its
// holder must not have given g's grant back already (its give-backs may
// come in any order), nor quotaGivenMax others whose give-back time is
// not over. The units out of g's grant shrink by g's.
func (qs *quotaMetas) acceptGiveBack(g GiveBack, now int64) bool {
	last := g.Grant.End + g.LeaseFor.Microseconds() + QuotaGiveBackGrace.Microseconds() - 1
	q := qs.get(g.Key, now)
	if q == nil || q.g != g.Grant.Generation || now > last {
		return false
	}
	if leaseTakenAtEnd(g.Limit.Algorithm) && (now >= g.Grant.End || q.n != g.Grant.ID) {
		return false
	}
	given := q.returned[g.Holder]
	if slices.ContainsFunc(given, func(b givenBack) bool { return b.id == g.Grant.ID && b.last >= now }) {
		return false
	}
	given = slices.DeleteFunc(given, func(b givenBack) bool { return b.last < now }) // no give-back of theirs lands
	if len(given) >= quotaGivenMax {
		return false
	}
	if q.returned == nil {
		q.returned = make(map[string][]givenBack, 1)
	}
	q.returned[g.Holder] = append(given, givenBack{g.Grant.ID, last})
	if gu, ok := q.grants[g.Grant.ID]; ok {
		if gu.units -= g.Units; gu.units > 0 {
			q.grants[g.Grant.ID] = gu
		} else {
			delete(q.grants, g.Grant.ID)
		}
	}
	return true
}

// quotaGivenMax bounds a holder's grants given back whose give-back time
// is not over: a give-back past it is refused (it only costs admissions),
// so that one's work, and the bookkeeping, stay bounded. The Lua's
// quota_given_max is the twin.
const quotaGivenMax = 64
