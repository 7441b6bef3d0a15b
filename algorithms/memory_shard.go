package algorithms

import (
	"math/rand/v2"
	"strings"
)

// memoryShard holds the keys of one share of the hash space, under its own
// lock, so that requests on different keys rarely wait for each other.
//
// Its index maps a key's 64-bit hash to the first slot of that hash: a map
// with no pointers in it, which the GC never scans. Two keys may share a
// hash; their slots are chained (next) and told apart by the full key each
// slot keeps, so different keys never share state, whatever the hash. The
// slots reuse freed places, so the slice only grows to the most keys the
// shard ever held at once, at most its share of the store's bound.
type memoryShard struct {
	index map[uint64]int32
	slots []memorySlot
	free  []int32
	live  int
	limit int // keys this shard may hold
}

// memorySlot is one key's place: its full key and hash, its state, and the
// next slot with the same hash (-1: none).
type memorySlot struct {
	key  string
	hash uint64
	next int32
	used bool
	s    state
}

// sampleOnInsert is how many slots each new key checks for expiry, as
// Redis's active expiry does: O(1) work per write keeps expired keys few,
// with no pause to sweep them all.
const sampleOnInsert = 3

func newMemoryShard(limit int) memoryShard {
	return memoryShard{index: make(map[uint64]int32), limit: max(1, limit)}
}

// find is the slot of key, or -1.
func (sh *memoryShard) find(key string, hash uint64) int32 {
	i, ok := sh.index[hash]
	if !ok {
		return -1
	}
	for i >= 0 && sh.slots[i].key != key {
		i = sh.slots[i].next
	}
	return i
}

// get is key's state as of now: zero when absent or expired.
func (sh *memoryShard) get(key string, hash uint64, now int64) state {
	i := sh.find(key, hash)
	if i < 0 || sh.slots[i].s.expires <= now {
		return state{}
	}
	return sh.slots[i].s
}

// put stores s for key; a new key first expires a sample of slots as of
// now, the time of the decision (never the wall clock: see AllowAt), and
// when the shard is full, forgets a random key.
func (sh *memoryShard) put(key string, hash uint64, s state, now int64) {
	if i := sh.find(key, hash); i >= 0 {
		sh.slots[i].s = s
		return
	}
	sh.expireSample(now)
	if sh.live >= sh.limit {
		sh.remove(int32(rand.IntN(len(sh.slots)))) // full: every slot is used
	}
	i := sh.alloc()
	next, chained := sh.index[hash]
	if !chained {
		next = -1
	}
	// the key is copied: it may be a slice of a larger string (the
	// handler builds every zone's key in one), which it must not pin
	sh.slots[i] = memorySlot{key: strings.Clone(key), hash: hash, next: next, used: true, s: s}
	sh.index[hash] = i
	sh.live++
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
		if sh.slots[i].used && sh.slots[i].s.expires <= now {
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
	*sl = memorySlot{} // drops the key, log and leases for the GC
	sh.free = append(sh.free, i)
	sh.live--
}

// delete forgets key.
func (sh *memoryShard) delete(key string, hash uint64) {
	if i := sh.find(key, hash); i >= 0 {
		sh.remove(i)
	}
}
