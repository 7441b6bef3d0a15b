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
}

// Settle applies ss at the current time.
func (m *MemoryStore) Settle(_ context.Context, ss []Settlement) error {
	m.SettleAt(time.Now(), ss)
	return nil
}

// SettleAt applies ss as of now.
func (m *MemoryStore) SettleAt(now time.Time, ss []Settlement) {
	us := now.UnixMicro()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range ss {
		settle, ok := settleFuncs[s.Limit.Algorithm]
		if !ok || (s.Delta == 0 && s.Lease == "") {
			continue
		}
		next, changed := settle(m.get(s.Key, us), us, s.At, s.Limit.Events,
			s.Limit.Window.Microseconds(), s.Limit.Capacity(), s.Delta, s.Lease)
		if changed {
			m.put(s.Key, next, us)
		}
	}
}
