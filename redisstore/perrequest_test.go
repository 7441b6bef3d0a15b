package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// Limits per request (docs/algorithms.md): one key may see different limits over
// time, as when a customer is upgraded. Every algorithm decides with the
// limit of the request in hand, counting what the key already used, and
// never fails on state written under another limit; the Go twins and the
// Lua agree.

// limitStep is one request of a per-request limit table: its own limit.
type limitStep struct {
	at        time.Duration // after t0
	limit     algorithms.Limit
	cost      int64
	allowed   bool
	remaining int64         // compared as max(0, remaining)
	retry     time.Duration // when denied; -1: unchecked
	slot      string        // concurrency
}

func TestLimitChangesMidWindow(t *testing.T) {
	const s, ms = time.Second, time.Millisecond
	fw := func(n int64) algorithms.Limit {
		return algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: n, Window: time.Minute}
	}
	sw := func(n int64) algorithms.Limit {
		return algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: n, Window: time.Minute}
	}
	sl := func(n int64) algorithms.Limit {
		return algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: n, Window: 10 * s}
	}
	tb := func(n, burst int64) algorithms.Limit {
		return algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: n, Window: 10 * s, Burst: burst}
	}
	cc := func(n int64) algorithms.Limit {
		return algorithms.Limit{Algorithm: algorithms.Concurrency, Events: n, Window: time.Minute}
	}
	tests := []struct {
		name  string
		steps []limitStep
	}{
		{"fixed_window", []limitStep{
			{0, fw(3), 1, true, 2, 0, ""},
			{1 * s, fw(3), 2, true, 0, 0, ""},
			{2 * s, fw(3), 1, false, 0, 58 * s, ""},
			// upgraded: 7 more, counting the 3 used
			{3 * s, fw(10), 1, true, 6, 0, ""},
			{4 * s, fw(10), 6, true, 0, 0, ""},
			{5 * s, fw(10), 1, false, 0, 55 * s, ""},
			// downgraded with 10 used: denied, no error
			{6 * s, fw(3), 1, false, 0, 54 * s, ""},
			{60 * s, fw(3), 3, true, 0, 0, ""},
			{61 * s, fw(10), 7, true, 0, 0, ""},
		}},
		{"sliding_window", []limitStep{
			// 20 slots of 3 s: the slot [0, 3s) counts until 63 s
			{0, sw(2), 1, true, 1, 0, ""},
			{1 * s, sw(2), 1, true, 0, 0, ""},
			{2 * s, sw(2), 1, false, 0, 61 * s, ""},
			{2 * s, sw(5), 1, true, 2, 0, ""},
			{4 * s, sw(5), 2, true, 0, 0, ""},
			{5 * s, sw(5), 1, false, 0, 58 * s, ""},
			// 5 used under 2: 4 must leave, the slot [3s, 6s) too
			{5 * s, sw(2), 1, false, 0, 61 * s, ""},
			// at 63 s the slot [0, 3s) has left: 2 used
			{63 * s, sw(2), 1, false, 0, 3 * s, ""},
			{63 * s, sw(5), 3, true, 0, 0, ""},
		}},
		{"sliding_log", []limitStep{
			{0, sl(2), 1, true, 1, 0, ""},
			{1 * s, sl(2), 1, true, 0, 0, ""},
			{2 * s, sl(2), 1, false, 0, 8 * s, ""},
			{2 * s, sl(4), 1, true, 1, 0, ""},
			{3 * s, sl(4), 1, true, 0, 0, ""},
			{4 * s, sl(4), 1, false, 0, 6 * s, ""},
			// 4 used under 2: three must leave, the third (at 2 s) at 12 s
			{4 * s, sl(2), 1, false, 0, 8 * s, ""},
			{11 * s, sl(2), 1, false, 0, 1 * s, ""},
			{12 * s, sl(2), 1, true, 0, 0, ""},
		}},
		{"token_bucket", []limitStep{
			// 1 a second, burst 3, then burst 6
			{0, tb(10, 3), 3, true, 0, 0, ""},
			{0, tb(10, 3), 1, false, 0, 1 * s, ""},
			{0, tb(10, 6), 1, true, 2, 0, ""},
			{0, tb(10, 6), 2, true, 0, 0, ""},
			// 6 in a bucket of 3: denied until it drains to 2
			{0, tb(10, 3), 1, false, 0, 4 * s, ""},
			{2 * s, tb(10, 3), 1, false, 0, 2 * s, ""},
			{4 * s, tb(10, 3), 1, true, 0, 0, ""},
			// twice the rate: 3 drains to 2 in half a second
			{4 * s, tb(20, 3), 1, false, 0, 500 * ms, ""},
			{4*s + 500*ms, tb(20, 3), 1, true, 0, 0, ""},
			// the slower rate again: one token a second
			{4*s + 500*ms, tb(10, 3), 1, false, 0, 1 * s, ""},
			{5*s + 500*ms, tb(10, 3), 1, true, 0, 0, ""},
			// a bigger burst at a lower rate: room at once
			{5*s + 500*ms, tb(5, 10), 7, true, 0, 0, ""},
			{5*s + 500*ms, tb(5, 10), 1, false, 0, 2 * s, ""},
		}},
		{"concurrency", []limitStep{
			{0, cc(1), 1, true, 0, 0, "a"},
			{0, cc(1), 1, false, 0, -1, "b"},
			{0, cc(3), 1, true, 1, 0, "c"},
			{0, cc(3), 1, true, 0, 0, "d"},
			{0, cc(3), 1, false, 0, -1, "e"},
			{0, cc(1), 1, false, 0, -1, "f"},
			{0, cc(4), 1, true, 0, 0, "g"},
		}},
	}
	for _, tt := range tests {
		for name, store := range stores(t) {
			t.Run(tt.name+"/"+name, func(t *testing.T) {
				key := fmt.Sprintf("limits:%s:%d", tt.name, rand.Int64())
				for i, st := range tt.steps {
					r := algorithms.Request{Key: key, Limit: st.limit, Cost: st.cost, Slot: st.slot, Settles: st.slot != ""}
					ds, err := store.AllowAt(context.Background(), t0.Add(st.at), []algorithms.Request{r})
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					d := ds[0]
					if d.Allowed != st.allowed || max(0, d.Remaining) != st.remaining || (!st.allowed && st.retry >= 0 && d.RetryAfter != st.retry) {
						t.Errorf("step %d at %v (%v) cost %d: got allowed=%v remaining=%d retry=%v, want allowed=%v remaining=%d retry=%v",
							i, st.at, st.limit, st.cost, d.Allowed, d.Remaining, d.RetryAfter, st.allowed, st.remaining, st.retry)
					}
				}
			})
		}
	}
}

// TestMemoryMatchesRedisAlternatingLimits: the differential test with each
// key's requests alternating at random between two limits, lower and
// higher, of one algorithm and window.
func TestMemoryMatchesRedisAlternatingLimits(t *testing.T) {
	pairs := [][2]algorithms.Limit{
		{{Algorithm: algorithms.FixedWindow, Events: 3, Window: 10 * time.Second}, {Algorithm: algorithms.FixedWindow, Events: 10, Window: 10 * time.Second}},
		{{Algorithm: algorithms.SlidingWindow, Events: 3, Window: 10 * time.Second}, {Algorithm: algorithms.SlidingWindow, Events: 10, Window: 10 * time.Second}},
		{{Algorithm: algorithms.SlidingLog, Events: 3, Window: 10 * time.Second}, {Algorithm: algorithms.SlidingLog, Events: 10, Window: 10 * time.Second}},
		// token_bucket: bursts alternate at one rate. Between rates the
		// stores differ here only in when state expires (Redis in real
		// time, while the test steps a simulated clock): TestLimitChangesMidWindow
		// checks rate changes.
		{{Algorithm: algorithms.TokenBucket, Events: 10, Window: 10 * time.Second, Burst: 3}, {Algorithm: algorithms.TokenBucket, Events: 10, Window: 10 * time.Second, Burst: 15}},
		{{Algorithm: algorithms.TokenBucket, Events: 7, Window: 10 * time.Second, Burst: 9}, {Algorithm: algorithms.TokenBucket, Events: 7, Window: 10 * time.Second, Burst: 2}},
		{{Algorithm: algorithms.TokenBucket, Events: 3, Window: 10 * time.Second, MaxDelay: 3 * time.Second}, {Algorithm: algorithms.TokenBucket, Events: 3, Window: 10 * time.Second, Burst: 5, MaxDelay: 3 * time.Second}},
		// large limits: products past 2^53
		{{Algorithm: algorithms.SlidingWindow, Events: 100_000, Window: 24 * time.Hour}, {Algorithm: algorithms.SlidingWindow, Events: 999_999_937, Window: 24 * time.Hour}},
		{{Algorithm: algorithms.FixedWindow, Events: 5_000, Window: 30 * 24 * time.Hour}, {Algorithm: algorithms.FixedWindow, Events: 5_000_000, Window: 30 * 24 * time.Hour}},
		{{Algorithm: algorithms.TokenBucket, Events: 1_000_000_000, Window: time.Minute, Burst: 1_000}, {Algorithm: algorithms.TokenBucket, Events: 1_000_000_000, Window: time.Minute, Burst: 999_999_937}},
	}
	s := stores(t)
	memory, redisStore := s["memory"], s["redis"]
	rng := rand.New(rand.NewPCG(3, 4))
	for _, pair := range pairs {
		t.Run(fmt.Sprintf("%s/%d-%d", pair[0].Algorithm, pair[0].Capacity(), pair[1].Capacity()), func(t *testing.T) {
			now := t0.Add(time.Duration(rng.Int64N(int64(time.Minute))))
			prefix := fmt.Sprintf("alt:%d:", rng.Int64())
			for i := range 600 {
				now = now.Add(time.Duration(rng.Int64N(int64(pair[0].Window / 8))))
				limit := pair[rng.IntN(2)]
				reqs := []algorithms.Request{{
					Key:   prefix + fmt.Sprint(rng.IntN(2)),
					Limit: limit,
					Cost:  randomCost(rng, limit.Capacity()),
				}}
				want, _ := memory.AllowAt(context.Background(), now, reqs)
				got, err := redisStore.AllowAt(context.Background(), now, reqs)
				if err != nil {
					t.Fatalf("step %d (%v): %v", i, limit, err)
				}
				if got[0] != want[0] {
					t.Fatalf("step %d (%s, %v, cost %d): redis %+v, memory %+v", i, reqs[0].Key, limit, reqs[0].Cost, got[0], want[0])
				}
				if d := got[0]; d.Allowed && d.Delay == 0 && d.Remaining < 0 {
					t.Fatalf("step %d (%v, cost %d): admitted past the limit: %+v", i, limit, reqs[0].Cost, d)
				}
			}
		})
	}
}
