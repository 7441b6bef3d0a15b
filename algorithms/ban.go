package algorithms

import (
	"sync"
	"time"
)

// Bans (Request.BanSeconds): a zone with a ban shuts a key out for the
// ban's duration from the moment the zone denies it (the trip). The store
// keeps the ban beside the key's state and reads it in the same atomic
// call as each decision of that key in that zone: on Redis a string at
// BanKey (the key's hash tag, so its Cluster slot) holding the ban's end
// in µs of the store's clock, expiring with it; in memory, memoryBans.
// While banned, the zone denies with the ban's remaining time and
// Remaining 0, and the request consumes nothing in any zone (all or
// nothing, as any denial). A denial in a peek or of a dry-run zone bans
// nothing. Reset lifts a key's ban with its state.

// banState is a zone's ban in one decision: none, in force, or set by
// this decision.
type banState uint8

const (
	notBanned banState = iota
	banned
	banStarted
	overCapacity // not banned, and a cost above capacity never bans
)

// memoryBans are the memory store's bans: each key's end in µs of the
// store's clock, at most max of them. They are read and set under the
// shard locks of the deciding request, so a key's ban and its state
// change together; mu guards the map across shards.
type memoryBans struct {
	mu    sync.Mutex
	until map[string]int64
	max   int
}

// at is the end of key's ban in force at now, or 0.
func (b *memoryBans) at(key string, now int64) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if u, ok := b.until[key]; ok && now < u {
		return u
	}
	return 0
}

// banSample is how many bans a set at the bound examines: a constant, so
// that a trip does bounded work however many bans there are.
const banSample = 8

// set bans key until end unless a ban is in force at now; it reports
// whether it did. At its bound it examines banSample bans (a map's
// iteration starts at random) and drops those that ended, or when none
// has, the first of them: the memory a flood of fresh keys can take stays
// bounded, and so does the work of each trip, at the price of a ban
// lifted early under such a flood (as the store forgets keys past its
// bound).
func (b *memoryBans) set(key string, now, end int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if u, ok := b.until[key]; ok && now < u {
		return false
	}
	if b.until == nil {
		b.until = make(map[string]int64)
	}
	if _, ok := b.until[key]; !ok && len(b.until) >= b.max {
		b.makeRoom(now)
	}
	b.until[key] = end
	return true
}

// makeRoom frees at least one entry, examining at most banSample.
func (b *memoryBans) makeRoom(now int64) {
	makeRoom(b.until, func(u int64) bool { return u <= now })
}

// makeRoom frees at least one entry of the bounded map m, examining at
// most banSample (a map's iteration starts at random): those ended among
// them, else the first. A flood of keys then costs an entry early, never
// unbounded memory.
func makeRoom[V any](m map[string]V, ended func(V) bool) {
	first, seen, freed := "", 0, false
	for k, v := range m {
		if seen == 0 {
			first = k
		}
		if ended(v) {
			delete(m, k)
			freed = true
		}
		if seen++; seen == banSample {
			break
		}
	}
	if !freed {
		delete(m, first)
	}
}

// lift ends key's ban.
func (b *memoryBans) lift(key string) {
	b.mu.Lock()
	delete(b.until, key)
	b.mu.Unlock()
}

// bannedVerdict is the verdict of a zone whose key is banned for left µs
// more: denied, nothing remaining, back when the ban ends.
func bannedVerdict(left int64) verdict {
	return verdict{retry: left, more: left, reset: left}
}

// tripped turns d, the denial of a zone with a ban that just set it, into
// the ban's: nothing remaining until it ends.
func tripped(d Decision, ban int64) Decision {
	left := time.Duration(ban) * time.Microsecond
	d.Remaining, d.RetryAfter, d.MoreAfter = 0, left, left
	d.ResetAfter = max(d.ResetAfter, left)
	d.Banned, d.BanStarted = true, true
	return d
}
