package algorithms

import (
	"context"
	"time"
)

// Settle applies ss at the current time.
func (m *MemoryStore) Settle(_ context.Context, ss []Settlement) error {
	m.SettleAt(time.Now(), ss)
	return nil
}

// SettleAt applies ss as of now, under the locks of their keys' shards.
func (m *MemoryStore) SettleAt(now time.Time, ss []Settlement) {
	us := now.UnixMicro()
	var hashBuf [4]uint64
	hashes := hashBuf[:0]
	for _, s := range ss {
		hashes = append(hashes, m.hash(s.Key))
	}
	var shardBuf [4]int
	defer m.unlock(m.lock(shardBuf[:0], hashes))
	for i, s := range ss {
		spec, ok := specs[s.Limit.Algorithm]
		if !ok || spec.settle == nil || (s.Delta == 0 && s.Slot == "") {
			continue
		}
		sh := m.shard(hashes[i])
		in := settleInputFor(s, us)
		if isGiveBack(s) { // a quota lease's unused units (memory_quota_meta.go)
			if !sh.quota.acceptGiveBack(s, us) {
				continue
			}
			if spec.lease != nil && spec.lease.atEnd { // the lease's entry, stamped with its end
				in.at = s.Quota.End
			}
		}
		var next state
		var changed bool
		if s.Limit.HasPeriod() {
			next, changed = fixedPeriodSettle(sh.get(s.Key, hashes[i], us), s.Limit, in)
		} else {
			next, changed = spec.settle(sh.get(s.Key, hashes[i], us), in)
		}
		if changed {
			sh.put(s.Key, hashes[i], next, us)
		}
	}
}
