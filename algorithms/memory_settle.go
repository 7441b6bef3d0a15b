package algorithms

import (
	"context"
	"time"
)

// settleFunc is one algorithm's settlement, the twin of its script's
// settle: s is the key's state (zero if absent), now the time, at the
// reservation's time, delta what to take beyond the reservation (negative:
// give back). It returns the new state, or false to leave the key alone.
type settleFunc func(s state, now, at, events, window, capacity, delta int64, lease string) (state, bool)

var settleFuncs = map[Algorithm]settleFunc{
	FixedWindow:   fixedWindowSettle,
	SlidingWindow: slidingWindowSettle,
	SlidingLog:    slidingLogSettle,
	TokenBucket:   tokenBucketSettle,
	Concurrency:   concurrencySettle,
}

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
		settle, ok := settleFuncs[s.Limit.Algorithm]
		if !ok || (s.Delta == 0 && s.Lease == "") {
			continue
		}
		sh := m.shard(hashes[i])
		var next state
		var changed bool
		if s.Limit.HasPeriod() {
			next, changed = fixedPeriodSettle(sh.get(s.Key, hashes[i], us), s.Limit, s.At, s.Delta)
		} else {
			next, changed = settle(sh.get(s.Key, hashes[i], us), us, s.At, s.Limit.Events,
				s.Limit.Window.Microseconds(), s.Limit.Capacity(), s.Delta, s.Lease)
		}
		if changed {
			sh.put(s.Key, hashes[i], next, us)
		}
	}
}
