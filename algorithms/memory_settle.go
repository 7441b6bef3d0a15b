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

// SettleAt applies ss as of now.
func (m *MemoryStore) SettleAt(now time.Time, ss []Settlement) { m.settle(now.UnixMicro(), ss, nil) }

// GiveBack applies gbs at the current time (QuotaLender).
func (m *MemoryStore) GiveBack(_ context.Context, gbs []GiveBack) error {
	m.GiveBackAt(time.Now(), gbs)
	return nil
}

// GiveBackAt applies gbs as of now: each refunds its units where its
// grant's bookkeeping (its LeaseBook) takes it; none without one.
func (m *MemoryStore) GiveBackAt(now time.Time, gbs []GiveBack) {
	ss := make([]Settlement, len(gbs))
	for i, g := range gbs {
		ss[i] = g.refund()
	}
	m.settle(now.UnixMicro(), ss, gbs)
}

// settle applies ss at now (µs), under the locks of their keys' shards;
// gbs, unless nil, are the give-backs that ss refund, one each: a
// settlement of one lands only if its grant's bookkeeping takes it.
func (m *MemoryStore) settle(us int64, ss []Settlement, gbs []GiveBack) {
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
		if gbs != nil {
			if m.book == nil || !m.book.GiveBack(gbs[i], us) {
				continue
			}
			if spec.lease != nil && spec.lease.atEnd { // the lease's entry, stamped with its end
				in.at = gbs[i].Grant.End
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

// Interface guards
var _ QuotaLender = (*MemoryStore)(nil)
