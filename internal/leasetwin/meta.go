package leasetwin

import (
	"maps"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// meta is one key's lease bookkeeping, the twin of the hash at
// StateBase(key)+":q" on Redis.
type meta struct {
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

// metaAfter is how long a key's bookkeeping outlives its latest lease
// end beyond the zone's quota_lease: a give-back is applied only before
// its lease's end plus quota_lease plus QuotaGiveBackGrace, so the
// generation it names is kept at least that long.
const metaAfter = algorithms.QuotaGiveBackGrace + time.Second

// metaAfterReset is the least a reset or an override keeps a key's
// bookkeeping: past the end + quota_lease of any lease granted before it
// (twice MaxQuotaLease), so that no give-back of such a lease finds a
// generation started anew (redisstore's quotaKeep).
const metaAfterReset = 2*algorithms.MaxQuotaLease + algorithms.QuotaGiveBackGrace + time.Second

// maxHolders bounds the holders a key's bookkeeping remembers: far more
// instances than a fleet runs, so the count of recent holders is exact in
// practice, and a key's bookkeeping stays bounded.
const maxHolders = 1024

// givenMax bounds a holder's grants given back whose give-back time is
// not over: a give-back past it is refused (it only costs admissions), so
// that one's work, and the bookkeeping, stay bounded. The Lua's
// quota_given_max is the twin.
const givenMax = 64

// out is the units out at now: those of this generation's grants not yet
// ended.
func (q *meta) out(now int64) int64 {
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
func (q *meta) holdersAt(now, forUs int64, holder string) int64 {
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
func (q *meta) takersAt(now, forUs int64, holder string) int64 {
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
func (q *meta) took(holder string, now int64) {
	if q.takers == nil {
		q.takers = make(map[string]int64, 1)
	}
	maps.DeleteFunc(q.takers, func(_ string, last int64) bool { return last <= now-algorithms.MaxQuotaLease.Microseconds() })
	q.takers[holder] = now
}

// hold sets holder's latest lease end, forgetting the holders no lease
// life (forUs, or the longest, MaxQuotaLease) counts any more, and past
// maxHolders the one whose lease ended first.
func (q *meta) hold(holder string, end, now, forUs int64) {
	if q.holders == nil {
		q.holders = make(map[string]int64, 1)
	}
	since := now - max(forUs, algorithms.MaxQuotaLease.Microseconds())
	for h, e := range q.holders {
		if e <= since {
			delete(q.holders, h)
			delete(q.returned, h)
		}
	}
	q.holders[holder] = end
	if len(q.holders) > maxHolders {
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
