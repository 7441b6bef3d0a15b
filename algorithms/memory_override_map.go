package algorithms

// Where a memory store holds its overrides: a map bounded by its keys.

import (
	"errors"
	"sync"
)

// memoryOverrides are a memory store's overrides, by store key, bounded
// by the store's keys.
type memoryOverrides struct {
	mu    sync.RWMutex
	byKey map[string]memoryOverride
	max   int
}

type memoryOverride struct {
	o       Override
	expires int64  // µs; 0: never
	key     string // the expanded key, kept for ListOverrides only when given
}

// ErrTooManyOverrides is SetOverride's error on a memory store holding as
// many overrides as it may hold keys.
var ErrTooManyOverrides = errors.New("too many overrides: the memory store holds at most one per key it may hold")

// set sets key's override at now (µs), ending at expires (0: never),
// o's capacity as its Burst, with expanded, the key as given ("": not
// kept). It
// holds mo.mu alone: a decision reads an override (overrideEnd) under its
// shards' locks, so mo.mu is never held while taking one.
func (mo *memoryOverrides) set(key, expanded string, o Override, expires, us int64) error {
	mo.mu.Lock()
	defer mo.mu.Unlock()
	if mo.byKey == nil {
		mo.byKey = make(map[string]memoryOverride)
	}
	if _, ok := mo.byKey[key]; !ok && len(mo.byKey) >= mo.max {
		for k, v := range mo.byKey { // drop the expired, then give up
			if v.expires != 0 && v.expires <= us {
				delete(mo.byKey, k)
			}
		}
		if len(mo.byKey) >= mo.max {
			return ErrTooManyOverrides
		}
	}
	o.Burst = o.capacity() // as the Redis store keeps it: a decision reports the capacity
	mo.byKey[key] = memoryOverride{o: o, expires: expires, key: expanded}
	return nil
}
