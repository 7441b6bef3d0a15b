package algorithms

// A memory store's overrides: SetOverride, ClearOverride, ListOverrides,
// and what a decision reads of them (withOverrides, overrideEnd). They
// are held in memoryOverrides (memory_override_map.go).

import (
	"context"
	"slices"
	"strings"
	"time"
)

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

// overridden holds, on the deciding goroutine's stack, withOverrides'
// copy of the requests and their overrides for up to 4 zones: reading
// the overrides then allocates nothing.
type overridden struct {
	reqs [4]Request
	os   [4]Override
}

// withOverrides is reqs, of which one reads its override
// (HasOverrides), as the store decides them at now: with the overrides
// in force, and with Overrides cleared, since nothing is left to read (so
// OverCapacityAt caps their costs at the capacity in force); and those
// overrides by request. Both are on buf while they fit.
func (m *MemoryStore) withOverrides(now int64, reqs []Request, buf *overridden) ([]Request, []Override) {
	out := append(buf.reqs[:0], reqs...)
	os := slices.Grow(buf.os[:0], len(reqs))[:len(reqs)]
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

var _ OverrideLister = (*MemoryStore)(nil)

// newQuotaGeneration starts a new generation of key's quota lease
// bookkeeping at now (us), if the store lends leases: a change of key's
// override does (SetOverride, ClearOverride).
func (m *MemoryStore) newQuotaGeneration(key string, now int64) {
	if m.book == nil {
		return
	}
	sh := m.shard(m.hash(key))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m.book.NewGeneration(key, now, false)
}
