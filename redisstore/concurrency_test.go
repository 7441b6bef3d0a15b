package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// slotOp is one step of a concurrency slot test: a request taking slot
// (take), a renewal of it or its release.
type slotOp struct {
	at      time.Duration
	do      string // "take", "renew", "release"
	slot    string
	allowed bool  // take: admitted
	remain  int64 // take: remaining after it
}

// runSlotOps runs ops against store on key.
func runSlotOps(t *testing.T, store settlingStore, key string, limit algorithms.Limit, ops []slotOp) {
	t.Helper()
	ctx := context.Background()
	for i, o := range ops {
		now := t0.Add(o.at)
		r := algorithms.Request{Key: key, Limit: limit, Cost: 1, Slot: o.slot, Settles: true}
		switch o.do {
		case "renew", "release":
			s := algorithms.Settlement{Key: key, Limit: limit, Slot: o.slot}
			if o.do == "renew" {
				s = algorithms.Renewal(r)
			}
			if err := store.SettleAt(ctx, now, []algorithms.Settlement{s}); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			continue
		}
		ds, err := store.AllowAt(ctx, now, []algorithms.Request{r})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := ds[0]; got.Allowed != o.allowed || got.Remaining != o.remain {
			t.Errorf("step %d (%s %s at %v): got allowed=%v remaining=%d, want %v %d",
				i, o.do, o.slot, o.at, got.Allowed, got.Remaining, o.allowed, o.remain)
		}
	}
}

// TestSlotRenewal: a renewed concurrency slot lives a window from its last
// renewal, in both stores; a renewal never brings back a slot given back
// or expired.
func TestSlotRenewal(t *testing.T) {
	limit := algorithms.Limit{Algorithm: algorithms.Concurrency, Events: 1, Window: time.Second}
	ms := time.Millisecond
	ops := []slotOp{
		{0, "take", "a", true, 0},
		{400 * ms, "renew", "a", false, 0},
		{800 * ms, "renew", "a", false, 0},
		{1500 * ms, "take", "b", false, 0}, // a lives until 1.8 s
		{1700 * ms, "renew", "a", false, 0},
		{2600 * ms, "take", "b", false, 0}, // until 2.7 s
		{2700 * ms, "take", "b", true, 0},  // a expired: a Caddy that stopped renewing
		{2800 * ms, "renew", "a", false, 0},
		{2900 * ms, "release", "b", false, 0},
		{3000 * ms, "renew", "b", false, 0}, // given back: stays so
		{3100 * ms, "take", "c", true, 0},
	}
	for name, store := range settlingStores(t) {
		t.Run(name, func(t *testing.T) {
			runSlotOps(t, store, "renew:"+name, limit, ops)
		})
	}
}

// TestSlotReleasedBeforeTaken: a slot given back before the call that
// takes it arrives (a timed-out decision's release, on another
// connection) stays given back: the late call does not hold a slot.
func TestSlotReleasedBeforeTaken(t *testing.T) {
	limit := algorithms.Limit{Algorithm: algorithms.Concurrency, Events: 1, Window: time.Minute}
	ms := time.Millisecond
	ops := []slotOp{
		{0, "release", "late", false, 0},
		{ms, "take", "late", true, 0}, // the call still decides; no slot stays
		{2 * ms, "take", "next", true, 0},
		{3 * ms, "take", "other", false, 0},
		{4 * ms, "release", "late", false, 0}, // twice: nothing changes
		{5 * ms, "take", "other", false, 0},
	}
	for name, store := range settlingStores(t) {
		t.Run(name, func(t *testing.T) {
			runSlotOps(t, store, "tombstone:"+name, limit, ops)
		})
	}
}
