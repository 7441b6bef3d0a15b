package algorithms

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Override is a key's own limit, set by an operator (the admin API) in a
// zone with overrides: it replaces the request's Events and Burst (a
// token bucket's capacity; 0 means Events) in the store, in the same
// atomic call as the decision. The zero Override is none.
// Both fit an int32 (MaxEvents is 10^9), which keeps a Decision small.
type Override struct {
	Events int32
	Burst  int32
}

// NewOverride is the override of events and burst (0: none), or an error
// when events is outside 1 to MaxEvents or burst outside 0 to MaxEvents.
func NewOverride(events, burst int64) (Override, error) {
	if events < 1 || events > MaxEvents {
		return Override{}, fmt.Errorf("events must be from 1 to %d, got %d", MaxEvents, events)
	}
	if burst < 0 || burst > MaxEvents {
		return Override{}, fmt.Errorf("burst must be from 1 to %d, or 0 for none (the events), got %d", MaxEvents, burst)
	}
	return Override{Events: int32(events), Burst: int32(burst)}, nil
}

// Set reports whether o is an override (not the zero value).
func (o Override) Set() bool { return o.Events > 0 }

// capacity is o's burst, or its events when it has none.
func (o Override) capacity() int32 {
	if o.Burst > 0 {
		return o.Burst
	}
	return o.Events
}

// Apply returns l with o's events and burst, or l when o is not set. For
// algorithms without a burst (Features), Burst stays 0.
func (o Override) Apply(l Limit) Limit {
	if !o.Set() {
		return l
	}
	l.Events = int64(o.Events)
	l.Burst = 0
	if l.Algorithm.Features().Burst {
		l.Burst = int64(o.capacity())
	}
	return l
}

// Validate reports whether o may be set on a zone of limit l: events and
// burst from 1 to 10^9, burst only on an algorithm with one, and the
// limit it makes one l's algorithm accepts (sliding_log at most 10,000;
// max_delay's bound).
func (o Override) Validate(l Limit) error {
	if _, err := NewOverride(int64(o.Events), int64(o.Burst)); err != nil {
		return err
	}
	if o.Burst != 0 && !l.Algorithm.Features().Burst {
		return fmt.Errorf("burst applies only to %s, not %s", NamesWith(Features{Burst: true}), l.Algorithm)
	}
	return o.Apply(l).Validate()
}

// HasOverrides reports whether any of reqs is of a zone with overrides:
// its limit may change at any moment on every instance, so a DenyCache
// answers it only while it is banned.
func HasOverrides(reqs []Request) bool {
	for i := range reqs {
		if reqs[i].Overrides {
			return true
		}
	}
	return false
}

// uncacheable reports whether a DenyCache must neither answer nor
// remember reqs but for a ban: settled after their response, or of a zone
// with overrides.
func uncacheable(reqs []Request) bool { return Settles(reqs) || HasOverrides(reqs) }

// ApplyOverrides sets, in each request of reqs whose decision reports an
// override, the limit in force: headers, settlements and capacity checks
// then use it.
func ApplyOverrides(reqs []Request, ds []Decision) {
	for i := range ds {
		if ds[i].Override.Set() {
			reqs[i].Limit = ds[i].Override.Apply(reqs[i].Limit)
		}
	}
}

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

// SetOverride is SetOverrideAt at the current time, keeping the
// expanded key ctx carries (WithOverrideKey) for ListOverrides.
func (m *MemoryStore) SetOverride(ctx context.Context, key string, o Override, ttl time.Duration) error {
	return m.setOverrideAt(time.Now(), key, OverrideKeyFrom(ctx), o, ttl)
}

// SetOverrideAt sets key's override as of now: it ends ttl later (0:
// never).
func (m *MemoryStore) SetOverrideAt(now time.Time, key string, o Override, ttl time.Duration) error {
	return m.setOverrideAt(now, key, "", o, ttl)
}

// setOverrideAt is SetOverrideAt keeping expanded ("": none) beside the
// override, for ListOverrides.
func (m *MemoryStore) setOverrideAt(now time.Time, key, expanded string, o Override, ttl time.Duration) error {
	us := now.UnixMicro()
	var expires int64 // as the Redis store keeps it: the end's µs
	if ttl > 0 {
		expires = now.Add(ttl).UnixMicro()
	}
	if err := m.overrides.set(key, expanded, o, expires, us); err != nil {
		return err
	}
	m.newQuotaGeneration(key, us) // leases granted under the old limit give nothing back
	return nil
}

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

// ClearOverride is ClearOverrideAt at the current time.
func (m *MemoryStore) ClearOverride(_ context.Context, key string) error {
	m.ClearOverrideAt(time.Now(), key)
	return nil
}

// ClearOverrideAt deletes key's override as of now, and starts a new
// generation of its quota leases, as SetOverrideAt does.
func (m *MemoryStore) ClearOverrideAt(now time.Time, key string) {
	m.overrides.mu.Lock()
	delete(m.overrides.byKey, key)
	m.overrides.mu.Unlock()
	m.newQuotaGeneration(key, now.UnixMicro())
}

// override is key's override in force at now (µs).
func (m *MemoryStore) override(key string, now int64) Override {
	mo := &m.overrides
	mo.mu.RLock()
	v, ok := mo.byKey[key]
	mo.mu.RUnlock()
	if !ok || (v.expires != 0 && v.expires <= now) {
		return Override{}
	}
	return v.o
}

// overrideEnd is when key's override in force at now ends (µs), or 0 for
// none or one that lasts until cleared: a quota lease granted under it
// ends no later, as the scripts' override_end.
func (m *MemoryStore) overrideEnd(key string, now int64) int64 {
	mo := &m.overrides
	mo.mu.RLock()
	v, ok := mo.byKey[key]
	mo.mu.RUnlock()
	if !ok || v.expires <= now {
		return 0
	}
	return v.expires
}

// withOverrides is reqs as the store decides them at now: with the
// overrides in force, and with Overrides cleared, since nothing is left to
// read (so OverCapacityAt caps their costs at the capacity in force); and
// those overrides by request (nil when no request reads one: zones without
// overrides allocate nothing).
func (m *MemoryStore) withOverrides(now int64, reqs []Request) ([]Request, []Override) {
	if !HasOverrides(reqs) {
		return reqs, nil
	}
	out := make([]Request, len(reqs))
	os := make([]Override, len(reqs))
	copy(out, reqs)
	for i := range out {
		if out[i].Overrides {
			if os[i] = m.override(out[i].Key, now); os[i].Set() {
				out[i].Limit = os[i].Apply(out[i].Limit)
			}
			out[i].Overrides = false
		}
	}
	return out, os
}

// ListOverrides is ListOverridesAt at the current time.
func (m *MemoryStore) ListOverrides(_ context.Context, prefix, after string, n int) ([]ListedOverride, string, error) {
	list, next := m.ListOverridesAt(time.Now(), prefix, after, n)
	return list, next, nil
}

// ListOverridesAt lists, as OverrideLister says, the overrides in force
// at now of the keys that start with prefix + "{": those ended are left
// out (and dropped when the store is full, by set, as before).
func (m *MemoryStore) ListOverridesAt(now time.Time, prefix, after string, n int) ([]ListedOverride, string) {
	us := now.UnixMicro()
	mo := &m.overrides
	var all []ListedOverride
	mo.mu.RLock()
	for k, v := range mo.byKey {
		hash, ok := KeyHash(prefix, k)
		if !ok || hash <= after || (v.expires != 0 && v.expires <= us) {
			continue
		}
		var in time.Duration
		if v.expires != 0 {
			in = time.Duration(v.expires-us) * time.Microsecond
		}
		all = append(all, ListedOverride{Hash: hash, Key: v.key, Override: v.o, ExpiresIn: in})
	}
	mo.mu.RUnlock()
	slices.SortFunc(all, func(a, b ListedOverride) int { return strings.Compare(a.Hash, b.Hash) })
	n = max(n, 1)
	if len(all) <= n {
		return all, ""
	}
	return all[:n], all[n-1].Hash
}
