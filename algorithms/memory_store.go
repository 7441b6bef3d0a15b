package algorithms

import (
	"hash/maphash"
	"slices"
	"sync"
)

// MaxMemoryKeys bounds the keys a memory store holds (about 150 MB at this
// size). Past it, a random key is forgotten for each new one: its client starts over, but memory stays bounded
// whatever the number of distinct keys a flood brings.
const MaxMemoryKeys = 1_000_000

// maxMemoryShards is how many locks a memory store splits its keys over:
// enough that the cores of a large machine rarely meet on one, few enough
// that a store of few keys still gives each shard some.
const maxMemoryShards = 64

// MemoryStore decides in this process's memory, with the same semantics as
// the Redis store. Limits are per instance: use it for one Caddy, or as a
// fallback.
//
// Keys are spread over shards by a maphash of the key, each shard under
// its own lock; a request on several keys locks their shards in order, so
// it stays all-or-nothing. Each shard holds at most its share of the
// bound (memory_shard.go).
//
// With a LeaseBook (NewMemoryStoreLending) it grants quota leases as the
// Redis store does (memory_quota.go), so that the two can be compared;
// the handler asks it for none (a zone's quota_lease is ignored on it).
type MemoryStore struct {
	seed      maphash.Seed
	shards    []lockedShard
	overrides memoryOverrides // zones with overrides read them (memory_override.go)
	bans      memoryBans      // zones with a ban read them (ban.go)
	book      LeaseBook       // nil: it lends no lease
}

// lockedShard pads a shard to its own cache lines, so that two cores
// taking neighbouring locks do not share one.
type lockedShard struct {
	mu sync.Mutex
	memoryShard
	_ [64]byte
}

// NewMemoryStore returns an empty memory store of at most MaxMemoryKeys.
func NewMemoryStore() *MemoryStore {
	return NewMemoryStoreOf(MaxMemoryKeys)
}

// NewMemoryStoreOf returns an empty memory store of at most maxKeys keys:
// up to 64 shards (a power of two, no more than maxKeys) of maxKeys/shards
// keys each.
func NewMemoryStoreOf(maxKeys int) *MemoryStore {
	n := 1
	for n*2 <= min(maxMemoryShards, maxKeys) {
		n *= 2
	}
	m := &MemoryStore{seed: maphash.MakeSeed(), shards: make([]lockedShard, n), overrides: memoryOverrides{max: max(1, maxKeys)},
		bans: memoryBans{max: max(1, maxKeys)}}
	for i := range m.shards {
		m.shards[i].memoryShard = newMemoryShard(maxKeys / n)
	}
	return m
}

// NewMemoryStoreLending returns an empty memory store of at most maxKeys
// keys that lends quota leases, its bookkeeping kept by book.
func NewMemoryStoreLending(maxKeys int, book LeaseBook) *MemoryStore {
	m := NewMemoryStoreOf(maxKeys)
	m.book = book
	return m
}

func (m *MemoryStore) hash(key string) uint64 { return maphash.String(m.seed, key) }

func (m *MemoryStore) shard(hash uint64) *lockedShard {
	return &m.shards[hash&uint64(len(m.shards)-1)]
}

// lock locks the distinct shards of hashes in index order (so two calls
// never wait on each other in a cycle), appending their indexes to idx,
// which it returns for unlock.
func (m *MemoryStore) lock(idx []int, hashes []uint64) []int {
	for _, h := range hashes {
		i := int(h & uint64(len(m.shards)-1))
		if !slices.Contains(idx, i) {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	for _, i := range idx {
		m.shards[i].mu.Lock()
	}
	return idx
}

// unlock unlocks the shards lock locked.
func (m *MemoryStore) unlock(idx []int) {
	for _, i := range idx {
		m.shards[i].mu.Unlock()
	}
}
