package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// maxTime is the algorithms' cap on a reported duration (2^52 µs): past
// it, times are not exact, so the exactness checks skip them.
const maxTime = (1 << 52) * time.Microsecond

// propertyLimits are small and large limits of every algorithm.
var propertyLimits = []algorithms.Limit{
	{Algorithm: algorithms.FixedWindow, Events: 7, Window: 10 * time.Second},
	{Algorithm: algorithms.SlidingWindow, Events: 7, Window: 10 * time.Second},
	{Algorithm: algorithms.SlidingLog, Events: 7, Window: 10 * time.Second},
	{Algorithm: algorithms.TokenBucket, Events: 7, Window: 10 * time.Second, Burst: 5},
	{Algorithm: algorithms.TokenBucket, Events: 3, Window: 7 * time.Second},
	{Algorithm: algorithms.FixedWindow, Events: 5_000_000, Window: 30 * 24 * time.Hour},
	{Algorithm: algorithms.SlidingWindow, Events: 100_000, Window: 24 * time.Hour},
	{Algorithm: algorithms.SlidingWindow, Events: 999_999_937, Window: algorithms.MaxWindow},
	{Algorithm: algorithms.SlidingLog, Events: 10_000, Window: time.Hour},
	{Algorithm: algorithms.TokenBucket, Events: 100_000, Window: 24 * time.Hour},
	{Algorithm: algorithms.TokenBucket, Events: 1_000_000_000, Window: time.Minute},
	{Algorithm: algorithms.TokenBucket, Events: 999_999_937, Window: algorithms.MaxWindow, Burst: 1_000_000_000},
}

// delayLimit is a token bucket with max_delay: a denial's retry is when a
// retry would wait max_delay, and t is no later.
var delayLimit = algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 10, Window: time.Hour, Burst: 3, MaxDelay: 5 * time.Minute}

// TestRetryAfterNotBeforeMore: over many random states of every algorithm,
// on both stores, a denying zone's RetryAfter is never earlier than its
// MoreAfter (so Retry-After ≥ t), MoreAfter is 0 exactly when nothing is
// used, and no denial is without more quota to come.
func TestRetryAfterNotBeforeMore(t *testing.T) {
	for name, store := range stores(t) {
		for _, limit := range append(propertyLimits, delayLimit) {
			t.Run(fmt.Sprintf("%s/%s/%d/%v", name, limit.Algorithm, limit.Capacity(), limit.Window), func(t *testing.T) {
				denied := 0
				walk(t, store, limit, 300, func(_ time.Time, _ algorithms.Request, d algorithms.Decision) {
					if d.Allowed {
						return
					}
					denied++
					if d.RetryAfter < d.MoreAfter {
						t.Errorf("denied with remaining %d: got RetryAfter %v < MoreAfter %v", d.Remaining, d.RetryAfter, d.MoreAfter)
					}
					if d.MoreAfter <= 0 {
						t.Errorf("denied with remaining %d: got MoreAfter %v, want > 0", d.Remaining, d.MoreAfter)
					}
				})
				if denied == 0 {
					t.Error("no request was denied: the walk tests nothing")
				}
			})
		}
	}
}

// TestMoreAndRetryAreExact: on the memory store (held to Redis by
// TestMemoryMatchesRedis), remaining grows exactly MoreAfter from now, and
// a denied request passes exactly RetryAfter from now.
func TestMoreAndRetryAreExact(t *testing.T) {
	for _, limit := range propertyLimits {
		t.Run(fmt.Sprintf("%s/%d/%v", limit.Algorithm, limit.Capacity(), limit.Window), func(t *testing.T) {
			m := algorithms.NewMemoryStore()
			walk(t, memoryAt{m}, limit, 300, func(now time.Time, r algorithms.Request, d algorithms.Decision) {
				t.Helper()
				checkMore(t, m, now, r, d)
				if !d.Allowed && d.RetryAfter < maxTime {
					if got := m.PeekAt(now.Add(d.RetryAfter-time.Microsecond), []algorithms.Request{r})[0]; got.Allowed {
						t.Errorf("cost %d passes at RetryAfter %v - 1µs", r.Cost, d.RetryAfter)
					}
					if got := m.PeekAt(now.Add(d.RetryAfter), []algorithms.Request{r})[0]; !got.Allowed {
						t.Errorf("cost %d: denied at RetryAfter %v, want allowed", r.Cost, d.RetryAfter)
					}
				}
			})
		})
	}
}

func checkMore(t *testing.T, m *algorithms.MemoryStore, now time.Time, r algorithms.Request, d algorithms.Decision) {
	t.Helper()
	probe := []algorithms.Request{{Key: r.Key, Limit: r.Limit, Cost: 1}}
	if d.MoreAfter == 0 {
		if got, want := d.Remaining, r.Limit.Capacity(); got != want {
			t.Errorf("MoreAfter 0: got remaining %d, want the capacity %d", got, want)
		}
		return
	}
	if d.MoreAfter >= maxTime {
		return
	}
	if got := m.PeekAt(now.Add(d.MoreAfter-time.Microsecond), probe)[0].Remaining; got != d.Remaining {
		t.Errorf("MoreAfter %v - 1µs: got remaining %d, want still %d", d.MoreAfter, got, d.Remaining)
	}
	if got := m.PeekAt(now.Add(d.MoreAfter), probe)[0].Remaining; got <= d.Remaining {
		t.Errorf("at MoreAfter %v: got remaining %d, want more than %d", d.MoreAfter, got, d.Remaining)
	}
}

// walk sends n random requests for a few keys of limit, at random times
// up to a quarter window apart, and calls check with each decision.
func walk(t *testing.T, store clockedStore, limit algorithms.Limit, n int, check func(time.Time, algorithms.Request, algorithms.Decision)) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(limit.Events), uint64(limit.Window)))
	now := t0.Add(time.Duration(rng.Int64N(int64(time.Minute))))
	prefix := fmt.Sprintf("walk:%d:", rand.Int64())
	for range n {
		if rng.IntN(4) == 0 { // often several at one instant
			now = now.Add(time.Duration(rng.Int64N(int64(limit.Window / 4))).Truncate(time.Microsecond))
		}
		r := algorithms.Request{Key: prefix + fmt.Sprint(rng.IntN(2)), Limit: limit, Cost: randomCost(rng, limit.Capacity())}
		ds, err := store.AllowAt(context.Background(), now, []algorithms.Request{r})
		if err != nil {
			t.Fatal(err)
		}
		check(now, r, ds[0])
	}
}

// TestFreshKeyIsWhole: a key never seen has its whole quota back now, on
// every algorithm and both stores: reset (the admin API's reset_seconds)
// and more are 0, remaining is the capacity; peeking takes nothing.
func TestFreshKeyIsWhole(t *testing.T) {
	ctx := context.Background()
	for name, s := range map[string]algorithms.InspectingStore{
		"memory": algorithms.NewMemoryStore(),
		"redis":  New(redistest.Start(t).Client(t), Options{}),
	} {
		for _, alg := range []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindow,
			algorithms.SlidingLog, algorithms.TokenBucket, algorithms.Concurrency} {
			limit := algorithms.Limit{Algorithm: alg, Events: 3, Window: time.Minute}
			req := []algorithms.Request{{Key: fmt.Sprintf("fresh:%s:%d", alg, rand.Int64()), Limit: limit, Cost: 1}}
			ds, err := s.Peek(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if d := ds[0]; d.Remaining != 3 || d.ResetAfter != 0 || d.MoreAfter != 0 {
				t.Errorf("%s %s: fresh key peeked: got remaining %d, reset %v, more %v; want 3, 0, 0", name, alg, d.Remaining, d.ResetAfter, d.MoreAfter)
			}
		}
	}
}
