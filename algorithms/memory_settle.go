package algorithms

import (
	"context"
	"time"
)

// settleInput is what an algorithm settles with, in µs where it is a
// time: the arguments of its script's settle, passed by value as input
// is. Fields an algorithm has no use for are ignored (only concurrency
// reads slot, only an algorithm with a burst capacity).
type settleInput struct {
	now      int64  // the store's clock
	at       int64  // Settlement.At: the reservation's time (its Decision's At)
	events   int64  // Limit.Events: the events per window (or period)
	window   int64  // Limit.Window; 0 for a calendar zone
	capacity int64  // Limit.Capacity: the burst, else events
	delta    int64  // Settlement.Delta: taken beyond the reservation (< 0 gives back; RenewSlot renews)
	slot     string // Settlement.Slot: concurrency's slot to give back or renew
}

// settleInputFor is what s settles with at now (µs).
func settleInputFor(s Settlement, now int64) settleInput {
	return settleInput{now: now, at: s.At, events: s.Limit.Events, window: s.Limit.Window.Microseconds(),
		capacity: s.Limit.Capacity(), delta: s.Delta, slot: s.Slot}
}

// settleFunc is one algorithm's settlement (its table entry's settle), the
// twin of its script's settle: s is the key's state (zero if absent), in
// the settlement and its limit. It returns the new state, or false to
// leave the key alone.
type settleFunc func(s state, in settleInput) (state, bool)

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
		if isGiveBack(s) { // a quota lease's unused units (memory_quota.go)
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
