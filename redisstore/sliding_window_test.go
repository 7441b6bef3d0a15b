package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// TestSlidingWindowTwoBursts is issue 23's case: events 10 window 2s; 10
// requests 150 ms before an epoch-aligned 2 s edge, then 20 more 1.9 s
// later, inside one trailing 2 s window. None of the second burst may
// pass; each is told to retry when the first burst's slot (100 ms) has
// left the window, and then the whole quota is back.
func TestSlidingWindowTwoBursts(t *testing.T) {
	limit := algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 10, Window: 2 * time.Second}
	edge := aligned(2 * time.Second)
	first := edge.Add(-150 * time.Millisecond)
	second := first.Add(1900 * time.Millisecond)
	// the first burst's slot is [edge-200ms, edge-100ms): it has left at edge+1.9s
	back := edge.Add(1900 * time.Millisecond)
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			key := fmt.Sprintf("bursts:%d", rand.Int64())
			allow := func(now time.Time) algorithms.Decision {
				t.Helper()
				ds, err := store.AllowAt(context.Background(), now, []algorithms.Request{{Key: key, Limit: limit, Cost: 1}})
				if err != nil {
					t.Fatal(err)
				}
				return ds[0]
			}
			for i := range 10 {
				if d := allow(first.Add(time.Duration(i) * time.Millisecond)); !d.Allowed {
					t.Fatalf("first burst, request %d: denied (%+v)", i+1, d)
				}
			}
			for i := range 20 {
				now := second.Add(time.Duration(i) * time.Millisecond)
				d := allow(now)
				if d.Allowed {
					t.Errorf("second burst, request %d at +%v: admitted, the 11th..%dth in 2s", i+1, now.Sub(first), 11+i)
				}
				if got, want := d.RetryAfter, back.Sub(now); got != want {
					t.Errorf("second burst, request %d: RetryAfter %v, want %v (when the first burst's slot has left)", i+1, got, want)
				}
				if d.MoreAfter != d.RetryAfter || d.Remaining != 0 {
					t.Errorf("second burst, request %d: MoreAfter %v remaining %d, want %v and 0", i+1, d.MoreAfter, d.Remaining, d.RetryAfter)
				}
			}
			if d := allow(back.Add(-time.Microsecond)); d.Allowed {
				t.Errorf("1µs before the first burst's slot left: admitted")
			}
			for i := range 10 {
				if d := allow(back); !d.Allowed || d.Remaining != int64(9-i) {
					t.Errorf("request %d once the first burst left: allowed=%v remaining=%d, want true and %d (the whole quota back)", i+1, d.Allowed, d.Remaining, 9-i)
				}
			}
		})
	}
}

// TestSlidingWindowFreshKeyFullQuota: a key never seen reports its whole
// quota, nothing to come back, and (once consumed) when its slot leaves.
func TestSlidingWindowFreshKeyFullQuota(t *testing.T) {
	limit := algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 10, Window: time.Minute}
	now := aligned(time.Minute).Add(4 * time.Second) // 1 s into the slot [3s, 6s)
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			key := fmt.Sprintf("fresh:%d", rand.Int64())
			peeker, ok := store.(interface {
				Peek(context.Context, []algorithms.Request) ([]algorithms.Decision, error)
			})
			if !ok {
				t.Fatalf("%T has no Peek", store)
			}
			ds, err := peeker.Peek(context.Background(), []algorithms.Request{{Key: key, Limit: limit, Cost: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if d := ds[0]; !d.Allowed || d.Remaining != 10 || d.MoreAfter != 0 || d.ResetAfter != 0 {
				t.Errorf("fresh key: got %+v, want allowed, remaining 10, MoreAfter and ResetAfter 0", d)
			}
			ds, err = store.AllowAt(context.Background(), now, []algorithms.Request{{Key: key, Limit: limit, Cost: 3}})
			if err != nil {
				t.Fatal(err)
			}
			if d, want := ds[0], time.Minute+2*time.Second; d.Remaining != 7 || d.MoreAfter != want || d.ResetAfter != want {
				t.Errorf("after 3: got %+v, want remaining 7, MoreAfter and ResetAfter %v", d, want)
			}
		})
	}
}

// TestSlidingWindowSettleMatches drives random requests and settlements
// (refunds to 0 and debts, in the newest slot and in older ones) through
// both stores and requires identical decisions: the Go twin of the
// script's settle, where slots are removed and the newest replaced.
func TestSlidingWindowSettleMatches(t *testing.T) {
	limit := algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 12, Window: 2 * time.Second}
	ss := settlingStores(t)
	memory, redisStore := ss["memory"], ss["redis"]
	rng := rand.New(rand.NewPCG(23, 1))
	ctx := context.Background()
	now := aligned(2 * time.Second)
	key := fmt.Sprintf("swsettle:%d", rand.Int64())
	var taken []algorithms.Decision
	for i := range 3000 {
		now = now.Add(time.Duration(rng.Int64N(int64(150 * time.Millisecond))).Truncate(time.Microsecond))
		if len(taken) > 0 && rng.IntN(3) == 0 {
			d := taken[rng.IntN(len(taken))]
			delta := rng.Int64N(7) - 4 // -4..2: refunds (often to 0) and debts
			s := []algorithms.Settlement{{Key: key, Limit: limit, At: d.At, Delta: delta}}
			for name, store := range ss {
				if err := store.SettleAt(ctx, now, s); err != nil {
					t.Fatalf("step %d: %s: %v", i, name, err)
				}
			}
			continue
		}
		reqs := []algorithms.Request{{Key: key, Limit: limit, Cost: 1 + rng.Int64N(3)}}
		want, _ := memory.AllowAt(ctx, now, reqs)
		got, err := redisStore.AllowAt(ctx, now, reqs)
		if err != nil {
			t.Fatal(err)
		}
		if got[0] != want[0] {
			t.Fatalf("step %d (cost %d): redis %+v, memory %+v", i, reqs[0].Cost, got[0], want[0])
		}
		if want[0].Allowed {
			taken = append(taken[max(0, len(taken)-30):], want[0])
		}
	}
}
