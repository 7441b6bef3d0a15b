package algorithms

import (
	"context"
	"sync"
	"time"
)

// sampleOnInsert is how many keys each new key checks for expiry, as
// Redis's active expiry does: O(1) work per write keeps expired keys few,
// with no pause to sweep them all.
const sampleOnInsert = 3

// MaxMemoryKeys bounds the keys a memory store holds (about 150 MB at this
// size). Past it, a random key is forgotten for each new one: its client starts over, but memory stays bounded
// whatever the number of distinct keys a flood brings.
const MaxMemoryKeys = 1_000_000

// MemoryStore decides in this process's memory, with the same semantics as
// the Redis store. Limits are per instance: use it for one Caddy, or as a
// fallback.
type MemoryStore struct {
	mu      sync.Mutex
	keys    map[string]state
	maxKeys int
}

// NewMemoryStore returns an empty memory store of at most MaxMemoryKeys.
func NewMemoryStore() *MemoryStore {
	return NewMemoryStoreOf(MaxMemoryKeys)
}

// NewMemoryStoreOf returns an empty memory store of at most maxKeys keys.
func NewMemoryStoreOf(maxKeys int) *MemoryStore {
	return &MemoryStore{keys: make(map[string]state), maxKeys: maxKeys}
}

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

// Reset deletes key's state.
func (m *MemoryStore) Reset(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.keys, key)
	return nil
}

// decideWithin denies a cost above capacity without touching state, and
// decides the rest.
func (m *MemoryStore) decideWithin(now time.Time, reqs []Request, commit bool) []Decision {
	ds, over, _ := overCapacity(reqs, func(fit []Request) ([]Decision, error) {
		return m.decide(now, fit, commit), nil
	})
	if over {
		return ds
	}
	return m.decide(now, reqs, commit)
}

func (m *MemoryStore) decide(now time.Time, reqs []Request, commit bool) []Decision {
	us := now.UnixMicro()
	verdicts := make([]verdict, len(reqs))
	m.mu.Lock()
	defer m.mu.Unlock()
	admit := true
	for i, r := range reqs {
		// token_bucket with its max_delay; other algorithms as they are
		verdicts[i] = tokenBucketFor(m.get(r.Key, us), us, r)
		verdicts[i].next = withLease(verdicts[i], r, us) // concurrency.go
		admit = admit && (verdicts[i].allowed || r.DryRun)
	}
	ds := make([]Decision, len(reqs))
	for i, v := range verdicts {
		remaining, reset, more := v.remaining, v.reset, v.more
		if commit && admit && v.allowed {
			m.put(reqs[i].Key, v.next, us)
			remaining, reset, more = remaining-reqs[i].Cost, v.resetAfter, v.moreAfter
		}
		ds[i] = Decision{
			Allowed:    v.allowed,
			Remaining:  remaining,
			ResetAfter: time.Duration(reset) * time.Microsecond,
			At:         us,
			MoreAfter:  time.Duration(more) * time.Microsecond,
		}
		ds[i].RetryAfter, ds[i].Delay = retryOrDelay(v.allowed, v.retry)
	}
	return ds
}

// Len is the number of keys held, expired or not.
func (m *MemoryStore) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.keys)
}

func (m *MemoryStore) get(key string, now int64) state {
	s, ok := m.keys[key]
	if !ok || s.expires <= now {
		return state{}
	}
	return s
}

// put stores s for key; a new key first expires a sample of keys as of
// now, the time of the decision (never the wall clock: see AllowAt).
func (m *MemoryStore) put(key string, s state, now int64) {
	if _, ok := m.keys[key]; !ok {
		m.expireSample(now)
	}
	m.keys[key] = s
}

// expireSample deletes the expired among a few keys (map order is random);
// when the store is full it also forgets the first of them.
func (m *MemoryStore) expireSample(now int64) {
	n := 0
	for k, s := range m.keys {
		if s.expires <= now || (n == 0 && len(m.keys) >= m.maxKeys) {
			delete(m.keys, k)
		}
		if n++; n == sampleOnInsert {
			return
		}
	}
}
