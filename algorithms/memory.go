package algorithms

// How a memory store decides: Allow, Peek and Reset, each zone by its
// algorithm's Go twin under the locks of its keys' shards (the store, its
// shards and locks are in memory_store.go).

import (
	"context"
	"slices"
	"time"
)

// Allow is AllowAt at the current time.
func (m *MemoryStore) Allow(_ context.Context, reqs []Request) ([]Decision, error) {
	return m.AllowAt(time.Now(), reqs), nil
}

// AllowAt decides reqs as of now: all are admitted and consume, or none.
func (m *MemoryStore) AllowAt(now time.Time, reqs []Request) []Decision {
	return m.decideWithin(now, reqs, true)
}

// Peek is PeekAt at the current time.
func (m *MemoryStore) Peek(_ context.Context, reqs []Request) ([]Decision, error) {
	return m.PeekAt(time.Now(), reqs), nil
}

// PeekAt decides reqs as AllowAt would, consuming nothing.
func (m *MemoryStore) PeekAt(now time.Time, reqs []Request) []Decision {
	return m.decideWithin(now, reqs, false)
}

// Reset is ResetAt at the current time.
func (m *MemoryStore) Reset(_ context.Context, key string) error {
	m.ResetAt(time.Now(), key)
	return nil
}

// ResetAt deletes key's state and lifts its ban as of now, and starts a
// new generation of its quota leases: none granted before gives back
// after it.
func (m *MemoryStore) ResetAt(now time.Time, key string) {
	hash := m.hash(key)
	sh := m.shard(hash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.delete(key, hash)
	m.bans.lift(key)
	if m.book != nil {
		m.book.NewGeneration(key, now.UnixMicro(), true)
	}
}

// Len is the number of keys held, expired or not.
func (m *MemoryStore) Len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += sh.live
		sh.mu.Unlock()
	}
	return n
}

// decideWithin denies a cost above capacity without touching state, and
// decides the rest.
func (m *MemoryStore) decideWithin(now time.Time, reqs []Request, commit bool) []Decision {
	var os []Override // nil when no request reads one
	if HasOverrides(reqs) {
		var buf overridden // declared here, so that zones without overrides do not clear it
		reqs, os = m.withOverrides(now.UnixMicro(), reqs, &buf)
	}
	ds, over, _ := OverCapacityAt(now.UnixMicro(), reqs, func(fit []Request) ([]Decision, error) {
		return m.decide(now, fit, commit), nil
	})
	if !over {
		ds = m.decide(now, reqs, commit)
	}
	for i := range os {
		ds[i].Override = os[i]
	}
	return ds
}

// decide decides reqs under their shards' locks: every verdict first, then,
// when all admit, the commits. Its scratch space is on the stack for up to
// 4 zones; the decisions are its one allocation.
func (m *MemoryStore) decide(now time.Time, reqs []Request, commit bool) []Decision {
	us := now.UnixMicro()
	var hashBuf [4]uint64
	var verdictBuf [4]verdict
	hashes, verdicts := hashBuf[:0], verdictBuf[:0]
	for _, r := range reqs {
		hashes = append(hashes, m.hash(r.Key))
	}
	var shardBuf [4]int
	defer m.unlock(m.lock(shardBuf[:0], hashes))
	var banBuf [4]banState
	bans := banBuf[:0]
	admit, leasing := true, false
	for i, r := range reqs {
		if m.lends(r) && !r.Overrides {
			if l, ok := m.book.LeasedLimit(r, us); ok {
				reqs = slices.Clone(reqs) // the caller's stay as they were
				reqs[i].Limit, r.Limit = l, l
			}
		}
		var v verdict
		b := notBanned
		if end := m.banned(r, us); end > 0 {
			v, b = bannedVerdict(end-us), banned
		} else if r.Cost > r.Limit.Capacity() { // a ban zone's (CostCap), after its ban
			v, b = verdict{remaining: r.Limit.Capacity(), retry: r.Limit.NeverRetryAt(us).Microseconds()}, overCapacity
		} else {
			v = decideRequest(m.shard(hashes[i]).get(r.Key, hashes[i], us), us, r)
		}
		verdicts, bans = append(verdicts, v), append(bans, b)
		admit = admit && (v.allowed || r.DryRun)
		leasing = leasing || m.lends(r)
	}
	var plans []quotaPlan // the quota leases granted (memory_quota.go)
	if leasing && commit && admit {
		var planBuf [4]quotaPlan
		plans = m.planGrants(planBuf[:0], us, reqs, verdicts)
	}
	ds := make([]Decision, len(reqs))
	for i := range verdicts {
		v := &verdicts[i]
		remaining, reset, more := v.remaining, v.reset, v.more
		if commit && admit && v.allowed {
			next := takeSlot(v.next, reqs[i], us) // concurrency.go
			next.held = holds(reqs[i], *v)
			if plans != nil {
				next = withGrant(next, reqs[i], &plans[i], remaining-reqs[i].Cost, us)
			}
			m.shard(hashes[i]).put(reqs[i].Key, hashes[i], next, us)
			remaining, reset, more = remaining-reqs[i].Cost, v.resetAfter, v.moreAfter
		}
		ds[i] = Decision{
			Allowed:    v.allowed,
			Remaining:  remaining,
			ResetAfter: time.Duration(reset) * time.Microsecond,
			At:         us,
			MoreAfter:  time.Duration(more) * time.Microsecond,
		}
		ds[i].RetryAfter, ds[i].Delay = RetryOrDelay(v.allowed, v.retry)
		ds[i].Banned = bans[i] == banned
		if commit && !v.allowed && bans[i] == notBanned && reqs[i].Bans() &&
			(!m.lends(reqs[i]) || m.tripsWithLeases(reqs[i], v.remaining, us)) {
			ban := reqs[i].Ban().Microseconds()
			if m.bans.set(reqs[i].Key, us, us+ban) {
				ds[i] = tripped(ds[i], ban)
			}
		}
	}
	if leasing {
		m.commitGrants(ds, us, reqs, plans, commit && admit)
	}
	return ds
}

// banned is the end of r's ban in force at now (µs), or 0; a zone without
// a ban reads nothing.
func (m *MemoryStore) banned(r Request, now int64) int64 {
	if !r.Bans() {
		return 0
	}
	return m.bans.at(r.Key, now)
}

// decideRequest decides r on s at now: a calendar zone in its period,
// every other zone by its algorithm's table entry (with its max_delay, see
// inputFor).
func decideRequest(s state, now int64, r Request) verdict {
	in := inputFor(r, now)
	if r.Limit.HasPeriod() {
		return fixedPeriod(s, in, r.Limit.spanAt(now))
	}
	return specs[r.Limit.Algorithm].decide(s, in)
}

// holds reports whether r's state, once v is committed, holds what a
// request still counts on: a concurrency slot, a reservation to settle
// after the response, or a delayed admission's turn. The memory store
// forgets such keys last when it is full (memoryShard.victim).
func holds(r Request, v verdict) bool {
	return r.Settles || r.Slot != "" || (v.allowed && v.retry > 0)
}

// Interface guards
var _ Store = (*MemoryStore)(nil)
