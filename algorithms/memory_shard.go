package algorithms

import (
	"math/rand/v2"
	"strings"
)

// memoryShard holds the keys of one share of the hash space, under its own
// lock, so that requests on different keys rarely wait for each other.
//
// Nothing the GC would scan grows with the keys of the common algorithms:
// the index maps a key's 64-bit hash to its first slot, and a slot holds
// the key itself (up to inlineKey bytes), its counters and its expiry, all
// plain values. Only what has pointers by nature lives beside, by slot: a
// longer key, a sliding_log's log, a concurrency zone's slots (ccSlots:
// the requests in flight, not the shard's own slots).
//
// Two keys may share a hash; their slots are chained (next) and told apart
// by the full key, so different keys never share state, whatever the hash.
// Freed slots are reused, so the slice only grows to the most keys the
// shard ever held at once, at most its share of the store's bound.
type memoryShard struct {
	index   map[uint64]int32
	slots   []memorySlot
	free    []int32
	long    map[int32]string   // keys longer than inlineKey
	logs    [][]logEntry       // by slot, for sliding_log: nil until a slot has one
	ccSlots []map[string]int64 // by slot, for concurrency: the key's concurrency slots (state.slots); nil until a slot has some
	live    int
	limit   int // keys this shard may hold
}

// inlineKey is the longest key a slot holds itself: Sluice's store keys
// (prefix, zone name, ':', a 24-byte hash tag and a format suffix) fit for zone names up
// to about 40 characters without a key_prefix.
const inlineKey = 64

// longKey is a slot's keyLen when its key is in memoryShard.long.
const longKey = 255

// memorySlot is one key's place: its hash and key, its state but for the
// log and concurrency slots, and the next slot with the same hash (-1: none).
type memorySlot struct {
	hash               uint64
	a, b, c, expires   int64
	next               int32
	used               bool
	hasLog, hasCCSlots bool
	held               bool // state.held: forgotten last when the shard is full
	keyLen             uint8
	key                [inlineKey]byte
}

// sampleOnInsert is how many slots each new key checks for expiry, as
// Redis's active expiry does: O(1) work per write keeps expired keys few,
// with no pause to sweep them all.
const sampleOnInsert = 3

func newMemoryShard(limit int) memoryShard {
	return memoryShard{
		index: make(map[uint64]int32),
		long:  make(map[int32]string),
		limit: max(1, limit),
	}
}

// is reports whether slot i holds key.
func (sh *memoryShard) is(i int32, key string) bool {
	sl := &sh.slots[i]
	if sl.keyLen == longKey {
		return sh.long[i] == key
	}
	return string(sl.key[:sl.keyLen]) == key
}

// find is the slot of key, or -1.
func (sh *memoryShard) find(key string, hash uint64) int32 {
	i, ok := sh.index[hash]
	if !ok {
		return -1
	}
	for i >= 0 && !sh.is(i, key) {
		i = sh.slots[i].next
	}
	return i
}

// get is key's state as of now: zero when absent or expired.
func (sh *memoryShard) get(key string, hash uint64, now int64) state {
	i := sh.find(key, hash)
	if i < 0 || sh.slots[i].expires <= now {
		return state{}
	}
	sl := &sh.slots[i]
	s := state{a: sl.a, b: sl.b, c: sl.c, expires: sl.expires, held: sl.held}
	if sl.hasLog {
		s.log = sh.logs[i]
	}
	if sl.hasCCSlots {
		s.slots = sh.ccSlots[i]
	}
	return s
}

// set stores s in slot i.
func (sh *memoryShard) set(i int32, s state) {
	sl := &sh.slots[i]
	sl.a, sl.b, sl.c, sl.expires, sl.held = s.a, s.b, s.c, s.expires, s.held
	if s.log != nil || sl.hasLog {
		sh.logs = grow(sh.logs, len(sh.slots))
		sh.logs[i] = s.log
	}
	if s.slots != nil || sl.hasCCSlots {
		sh.ccSlots = grow(sh.ccSlots, len(sh.slots))
		sh.ccSlots[i] = s.slots
	}
	sl.hasLog, sl.hasCCSlots = s.log != nil, s.slots != nil
}

// grow is side extended with zero values to n entries.
func grow[T any](side []T, n int) []T {
	if len(side) < n {
		side = append(side, make([]T, n-len(side))...)
	}
	return side
}

// put stores s for key; a new key first expires a sample of slots as of
// now, the time of the decision (never the wall clock: see AllowAt), and
// when the shard is full, forgets a key (victim).
func (sh *memoryShard) put(key string, hash uint64, s state, now int64) {
	if i := sh.find(key, hash); i >= 0 {
		sh.set(i, s)
		return
	}
	sh.expireSample(now)
	if sh.live >= sh.limit {
		sh.remove(sh.victim(now)) // full: every slot is used
	}
	i := sh.alloc()
	next, chained := sh.index[hash]
	if !chained {
		next = -1
	}
	sh.slots[i] = memorySlot{hash: hash, next: next, used: true}
	if len(key) <= inlineKey {
		sh.slots[i].keyLen = uint8(copy(sh.slots[i].key[:], key))
	} else {
		// a copy: key may be a slice of a larger string (the handler
		// builds every zone's key in one), which it must not pin
		sh.slots[i].keyLen, sh.long[i] = longKey, strings.Clone(key)
	}
	sh.set(i, s)
	sh.index[hash] = i
	sh.live++
}

// evictScan is how many slots a full shard looks at to choose the key it
// forgets: O(1) work per new key, as Redis's sampled eviction.
const evictScan = 16

// victim is the slot a full shard forgets for a new key: of evictScan
// slots from a random one, the first expired, else the first whose key
// holds no concurrency slot or reservation (a plain counter: its client
// only starts over), else the random one. Every slot is used.
func (sh *memoryShard) victim(now int64) int32 {
	n := int32(len(sh.slots))
	start := int32(rand.IntN(int(n)))
	plain := int32(-1)
	for k := range min(n, evictScan) {
		i := (start + k) % n
		sl := &sh.slots[i]
		if sl.expires <= now {
			return i
		}
		if plain < 0 && !sl.held && !sl.hasCCSlots {
			plain = i
		}
	}
	if plain >= 0 {
		return plain
	}
	return start
}

// alloc is a free slot, reused or new.
func (sh *memoryShard) alloc() int32 {
	if n := len(sh.free); n > 0 {
		i := sh.free[n-1]
		sh.free = sh.free[:n-1]
		return i
	}
	sh.slots = append(sh.slots, memorySlot{})
	return int32(len(sh.slots) - 1)
}

// expireSample frees the expired among a few random slots.
func (sh *memoryShard) expireSample(now int64) {
	if len(sh.slots) == 0 {
		return
	}
	for range sampleOnInsert {
		i := int32(rand.IntN(len(sh.slots)))
		if sh.slots[i].used && sh.slots[i].expires <= now {
			sh.remove(i)
		}
	}
}

// remove frees slot i, unlinking it from its hash's chain.
func (sh *memoryShard) remove(i int32) {
	sl := &sh.slots[i]
	if !sl.used {
		return
	}
	if head := sh.index[sl.hash]; head == i {
		if sl.next < 0 {
			delete(sh.index, sl.hash)
		} else {
			sh.index[sl.hash] = sl.next
		}
	} else {
		for p := head; p >= 0; p = sh.slots[p].next {
			if sh.slots[p].next == i {
				sh.slots[p].next = sl.next
				break
			}
		}
	}
	if sl.hasLog { // for the GC
		sh.logs[i] = nil
	}
	if sl.hasCCSlots {
		sh.ccSlots[i] = nil
	}
	if sl.keyLen == longKey {
		delete(sh.long, i)
	}
	*sl = memorySlot{}
	sh.free = append(sh.free, i)
	sh.live--
}

// delete forgets key.
func (sh *memoryShard) delete(key string, hash uint64) {
	if i := sh.find(key, hash); i >= 0 {
		sh.remove(i)
	}
}
