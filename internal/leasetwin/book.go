// Package leasetwin is the Go twin of the quota lease bookkeeping the Lua
// keeps beside a key's state on Redis (luascripts/quota_lease.lua): a
// key's generation, its grants and their units out, the instances that
// hold leases on it or take from it. A memory store given a Book
// (NewMemoryStore) lends quota leases as the Redis store does, so tests
// check the Lua's leases against Go, and run the lease holder (package
// quota) without Redis. Nothing in production uses it: the handler asks
// its embedded store for no lease.
package leasetwin

import (
	"maps"
	"slices"
	"sync"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// NewMemoryStore returns an empty memory store of at most
// algorithms.MaxMemoryKeys keys that lends quota leases.
func NewMemoryStore() *algorithms.MemoryStore {
	m, _ := NewMemoryStoreOf(algorithms.MaxMemoryKeys)
	return m
}

// NewMemoryStoreOf returns an empty memory store of at most maxKeys keys
// that lends quota leases, and its book, of as many keys.
func NewMemoryStoreOf(maxKeys int) (*algorithms.MemoryStore, *Book) {
	b := &Book{max: max(1, maxKeys)}
	return algorithms.NewMemoryStoreLending(maxKeys, b), b
}

// Book is a memory store's quota lease bookkeeping (algorithms.LeaseBook),
// at most max keys of it.
type Book struct {
	mu    sync.Mutex
	byKey map[string]*meta
	max   int
}

var _ algorithms.LeaseBook = (*Book)(nil)

// Keys is the number of keys whose bookkeeping is held, expired or not.
func (b *Book) Keys() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.byKey)
}

// LeasedLimit is r's limit while its key has units out under a smaller
// one (one limit per lease): the smaller events and capacity; ok is
// false when r's own applies.
func (b *Book) LeasedLimit(r algorithms.Request, now int64) (l algorithms.Limit, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.get(r.Key, now)
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

// Sharers are the key's recent holders (holdersAt) and takers
// (takersAt), 1 each for a key without bookkeeping.
func (b *Book) Sharers(r algorithms.Request, now int64) (holders, takers int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.get(r.Key, now)
	if q == nil {
		return 1, 1
	}
	forUs := r.Quota.For.Microseconds()
	return q.holdersAt(now, forUs, r.Quota.Holder), q.takersAt(now, forUs, r.Quota.Holder)
}

// Grant records a grant of units to r's holder until end, in the key's
// generation (a first grant's is above a lost store's generations, as
// the scripts'), forgetting the grants ended.
func (b *Book) Grant(r algorithms.Request, units, end, now int64) algorithms.QuotaGrant {
	b.mu.Lock()
	defer b.mu.Unlock()
	forUs := r.Quota.For.Microseconds()
	q := b.take(r.Key, now)
	if q.g == 0 {
		q.g = now
	}
	q.n++
	maps.DeleteFunc(q.grants, func(_ int64, g grantUnits) bool { return g.end <= now })
	if q.grants == nil {
		q.grants = make(map[int64]grantUnits, 1)
	}
	q.grants[q.n] = grantUnits{units: units, end: end}
	q.e = max(q.e, end)
	q.l, q.b = r.Limit.Events, r.Limit.Capacity()
	q.hold(r.Quota.Holder, end, now, forUs)
	q.expires = max(q.expires, q.e+forUs+metaAfter.Microseconds()) // a reset's may be longer
	return algorithms.QuotaGrant{Generation: q.g, ID: q.n, Out: q.out(now)}
}

// Report is what a leasing zone's decision of r says without a grant:
// the units out, with the latest end of the grants they are in, and the
// holders (none before a first grant). When r took (taken) without a
// lease, its holder is recorded as a taker once a lease life since it
// last held or took.
func (b *Book) Report(r algorithms.Request, now int64, taken bool) (algorithms.QuotaGrant, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.get(r.Key, now)
	if q == nil {
		return algorithms.QuotaGrant{}, false
	}
	forUs := r.Quota.For.Microseconds()
	g := algorithms.QuotaGrant{Generation: q.g, ID: q.n}
	if q.n > 0 {
		g.Takers = q.takersAt(now, forUs, r.Quota.Holder)
	}
	for _, gu := range q.grants {
		if now < gu.end {
			g.Out += gu.units
			g.End = max(g.End, gu.end)
		}
	}
	if taken && q.holders[r.Quota.Holder] <= now-forUs && q.takers[r.Quota.Holder] <= now-forUs {
		q.took(r.Quota.Holder, now)
	}
	return g, true
}

// Out is the units of key's grants not yet ended at now.
func (b *Book) Out(key string, now int64) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q := b.get(key, now); q != nil {
		return q.out(now)
	}
	return 0
}

// NewGeneration starts a new generation of key's bookkeeping at now (a
// reset, ended, or an override): no lease granted before it gives back
// after it; after a reset no units are out (the state that counted them
// is gone). It is kept at least metaAfterReset.
func (b *Book) NewGeneration(key string, now int64, ended bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.take(key, now)
	if q.g == 0 { // a new hash, as the Redis store's: above a lost store's generations
		q.g = now
	}
	q.g++
	clear(q.grants) // their holders drop them
	if ended {
		q.e = 0
	}
	q.expires = max(q.expires, now+metaAfterReset.Microseconds())
}

// GiveBack reports whether give-back g applies at now, and if so counts
// its units back from the units out: the key's bookkeeping must still be
// of g's grant's generation, before its lease's end plus its
// quota_lease, and for an algorithm whose leases are taken at their end
// (token_bucket) before its lease's end, with no later grant; and its
// holder must not have given g's grant back already (its give-backs may
// come in any order), nor givenMax others whose give-back time is not
// over. The units out of g's grant shrink by g's.
func (b *Book) GiveBack(g algorithms.GiveBack, now int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	last := g.Grant.End + g.LeaseFor.Microseconds() + algorithms.QuotaGiveBackGrace.Microseconds() - 1
	q := b.get(g.Key, now)
	if q == nil || q.g != g.Grant.Generation || now > last {
		return false
	}
	if rules, _ := algorithms.LeaseRulesOf(g.Limit.Algorithm); rules.TakenAtEnd() && (now >= g.Grant.End || q.n != g.Grant.ID) {
		return false
	}
	given := q.returned[g.Holder]
	if slices.ContainsFunc(given, func(gb givenBack) bool { return gb.id == g.Grant.ID && gb.last >= now }) {
		return false
	}
	given = slices.DeleteFunc(given, func(gb givenBack) bool { return gb.last < now }) // no give-back of theirs lands
	if len(given) >= givenMax {
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

// get is key's bookkeeping at now, or nil when it has none (or it
// expired).
func (b *Book) get(key string, now int64) *meta {
	if q := b.byKey[key]; q != nil && now < q.expires {
		return q
	}
	return nil
}

// take is key's bookkeeping at now, created (generation 0) when it has
// none; at the bound, room is made first (makeRoom).
func (b *Book) take(key string, now int64) *meta {
	if q := b.get(key, now); q != nil {
		return q
	}
	if b.byKey == nil {
		b.byKey = make(map[string]*meta)
	}
	if _, ok := b.byKey[key]; !ok && len(b.byKey) >= b.max {
		b.makeRoom(now)
	}
	q := &meta{}
	b.byKey[key] = q
	return q
}

// roomSample is how many keys makeRoom examines at most.
const roomSample = 8

// makeRoom frees at least one key's bookkeeping, examining at most
// roomSample (a map's iteration starts at random): those expired among
// them, else the first.
func (b *Book) makeRoom(now int64) {
	first, seen, freed := "", 0, false
	for k, q := range b.byKey {
		if seen == 0 {
			first = k
		}
		if q.expires <= now {
			delete(b.byKey, k)
			freed = true
		}
		if seen++; seen == roomSample {
			break
		}
	}
	if !freed {
		delete(b.byKey, first)
	}
}
