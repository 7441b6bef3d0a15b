package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/leasetwin"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// t0 is aligned to every window used below, so windows start at t0.
var t0 = time.Unix(1_800_000_000, 0)

// clockedStore is a store driven by a time parameter.
type clockedStore interface {
	AllowAt(ctx context.Context, now time.Time, reqs []algorithms.Request) ([]algorithms.Decision, error)
}

type memoryAt struct{ *algorithms.MemoryStore }

func (m memoryAt) AllowAt(_ context.Context, now time.Time, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	return m.MemoryStore.AllowAt(now, reqs), nil
}

// stores returns a fresh memory store and a Redis store on a new
// redis-server.
func stores(t *testing.T) map[string]clockedStore {
	t.Helper()
	srv := redistest.Start(t)
	return map[string]clockedStore{
		"memory": memoryAt{leasetwin.NewMemoryStore()},
		"redis":  New(srv.Client(t), Options{}),
	}
}

type step struct {
	at        time.Duration // after t0
	cost      int64
	allowed   bool
	remaining int64
	retry     time.Duration // when denied
}

func TestAlgorithmSteps(t *testing.T) {
	const us = time.Microsecond
	tests := []struct {
		name  string
		limit algorithms.Limit
		steps []step
	}{
		{"fixed_window", algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 3, Window: time.Minute}, []step{
			{0, 1, true, 2, 0},
			{time.Second, 1, true, 1, 0},
			{2 * time.Second, 1, true, 0, 0},
			{3 * time.Second, 1, false, 0, 57 * time.Second},
			{60 * time.Second, 1, true, 2, 0},
			{61 * time.Second, 2, true, 0, 0},
			// above capacity: denied for a window, the store untouched (r is the capacity)
			{62 * time.Second, 4, false, 3, time.Minute},
		}},
		{"sliding_window", algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 4, Window: time.Minute}, []step{
			// 20 slots of 3 s: the slot [0, 3s) counts until 63 s
			{0, 1, true, 3, 0},
			{0, 1, true, 2, 0},
			{time.Second, 1, true, 1, 0},
			{2 * time.Second, 1, true, 0, 0},
			{30 * time.Second, 1, false, 0, 33 * time.Second},
			{63*time.Second - us, 1, false, 0, us},
			{63 * time.Second, 1, true, 3, 0},
			{64 * time.Second, 3, true, 0, 0},
			// the slot [63s, 66s) holds 4: they leave at 126 s
			{65 * time.Second, 1, false, 0, 61 * time.Second},
			{91 * time.Second, 5, false, 4, time.Minute}, // above capacity
		}},
		{"sliding_log", algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: 3, Window: 10 * time.Second}, []step{
			{0, 1, true, 2, 0},
			{time.Second, 1, true, 1, 0},
			{2 * time.Second, 1, true, 0, 0},
			{3 * time.Second, 1, false, 0, 7 * time.Second},
			{10 * time.Second, 1, true, 0, 0}, // the entry at 0 left the window
			{10 * time.Second, 2, false, 0, 2 * time.Second},
			{12 * time.Second, 2, true, 0, 0},
		}},
		{"token_bucket", algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 10, Window: 10 * time.Second, Burst: 3}, []step{
			{0, 1, true, 2, 0},
			{0, 1, true, 1, 0},
			{0, 1, true, 0, 0},
			{0, 1, false, 0, time.Second},
			{500 * time.Millisecond, 1, false, 0, 500 * time.Millisecond},
			{time.Second, 1, true, 0, 0},
			{10 * time.Second, 2, true, 1, 0},
			{10 * time.Second, 4, false, 3, 10 * time.Second}, // above capacity
		}},
		{"token_bucket_fractional_rate", algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 3, Window: time.Second}, []step{
			// one token every 333333⅓ µs: exact, never a unit lost
			{0, 3, true, 0, 0},
			{0, 1, false, 0, 333334 * us},
			{333333 * us, 1, false, 0, us},
			{333334 * us, 1, true, 0, 0},
			{time.Second + 333334*us, 3, true, 0, 0},
		}},
	}
	for _, tt := range tests {
		for name, store := range stores(t) {
			t.Run(tt.name+"/"+name, func(t *testing.T) {
				key := fmt.Sprintf("test:%s:%d", tt.name, rand.Int64())
				for i, s := range tt.steps {
					ds, err := store.AllowAt(context.Background(), t0.Add(s.at), []algorithms.Request{{Key: key, Limit: tt.limit, Cost: s.cost}})
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					d := ds[0]
					if d.Allowed != s.allowed || d.Remaining != s.remaining || (!s.allowed && d.RetryAfter != s.retry) {
						t.Errorf("step %d at %v cost %d: got allowed=%v remaining=%d retry=%v, want allowed=%v remaining=%d retry=%v",
							i, s.at, s.cost, d.Allowed, d.Remaining, d.RetryAfter, s.allowed, s.remaining, s.retry)
					}
				}
			})
		}
	}
}

func TestAllOrNothing(t *testing.T) {
	tight := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Minute}
	loose := algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 10, Window: time.Minute}
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			reqs := []algorithms.Request{
				{Key: "aon:loose", Limit: loose, Cost: 1},
				{Key: "aon:tight", Limit: tight, Cost: 1},
			}
			for i, want := range []bool{true, false, false} {
				ds, err := store.AllowAt(ctx, t0, reqs)
				if err != nil {
					t.Fatal(err)
				}
				if got := algorithms.Admitted(reqs, ds); got != want {
					t.Fatalf("request %d: got admitted=%v, want %v", i, got, want)
				}
			}
			// the two denied requests consumed nothing in the loose zone
			ds, err := store.AllowAt(ctx, t0, reqs[:1])
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ds[0].Remaining, int64(8); got != want {
				t.Errorf("loose zone remaining: got %d, want %d", got, want)
			}
		})
	}
}

func TestDryRunZoneNeverDenies(t *testing.T) {
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Minute}
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			reqs := []algorithms.Request{
				{Key: "dry:enforced", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 5, Window: time.Minute}, Cost: 1},
				{Key: "dry:shadow", Limit: limit, Cost: 1, DryRun: true},
			}
			var shadowDenied int
			for i := range 3 {
				ds, err := store.AllowAt(context.Background(), t0, reqs)
				if err != nil {
					t.Fatal(err)
				}
				if !algorithms.Admitted(reqs, ds) {
					t.Fatalf("request %d denied; a dry-run zone must not deny", i)
				}
				if !ds[1].Allowed {
					shadowDenied++
				}
				if got, want := ds[0].Remaining, int64(4-i); got != want {
					t.Errorf("request %d: enforced remaining got %d, want %d", i, got, want)
				}
			}
			if got, want := shadowDenied, 2; got != want {
				t.Errorf("shadow zone denials: got %d, want %d", got, want)
			}
		})
	}
}

// TestMemoryMatchesRedis drives the same random sequence of (time, key,
// cost) through both stores and requires identical decisions.
func TestMemoryMatchesRedis(t *testing.T) {
	limits := []algorithms.Limit{
		{Algorithm: algorithms.FixedWindow, Events: 7, Window: 10 * time.Second},
		{Algorithm: algorithms.SlidingWindow, Events: 7, Window: 10 * time.Second},
		{Algorithm: algorithms.SlidingLog, Events: 7, Window: 10 * time.Second},
		{Algorithm: algorithms.TokenBucket, Events: 7, Window: 10 * time.Second, Burst: 5},
		{Algorithm: algorithms.TokenBucket, Events: 3, Window: 7 * time.Second},
		// large limits, where products pass 2^53 and int64: the exact helpers
		{Algorithm: algorithms.SlidingWindow, Events: 100_000, Window: 24 * time.Hour},
		{Algorithm: algorithms.SlidingWindow, Events: 999_999_937, Window: algorithms.MaxWindow},
		// a window the slots do not divide: 350001 µs slots
		{Algorithm: algorithms.SlidingWindow, Events: 5, Window: 7*time.Second + 13*time.Microsecond},
		{Algorithm: algorithms.FixedWindow, Events: 5_000_000, Window: 30 * 24 * time.Hour},
		{Algorithm: algorithms.TokenBucket, Events: 1_000_000_000, Window: time.Minute},
		{Algorithm: algorithms.TokenBucket, Events: 999_999_937, Window: algorithms.MaxWindow, Burst: 1_000_000_000},
		{Algorithm: algorithms.TokenBucket, Events: 1, Window: algorithms.MaxWindow, Burst: 1_000_000_000},
		{Algorithm: algorithms.TokenBucket, Events: 1_000_000_000, Window: time.Second, Burst: 999_999_937}, // not 1ms: Redis expires keys in real time, the test steps a simulated clock
		{Algorithm: algorithms.SlidingLog, Events: 10_000, Window: time.Hour},
		// max_delay: reservations past capacity (the second's level passes 2^52 units)
		{Algorithm: algorithms.TokenBucket, Events: 7, Window: 10 * time.Second, Burst: 5, MaxDelay: 3 * time.Second},
		{Algorithm: algorithms.TokenBucket, Events: 1_000_000, Window: time.Hour, MaxDelay: time.Hour},
		{Algorithm: algorithms.TokenBucket, Events: 1_000_000_000, Window: time.Minute, Burst: 3, MaxDelay: 30 * time.Second},
	}
	s := stores(t)
	memory, redisStore := s["memory"], s["redis"]
	rng := rand.New(rand.NewPCG(1, 2))
	for _, limit := range limits {
		t.Run(fmt.Sprintf("%s/%d/%v/%v", limit.Algorithm, limit.Capacity(), limit.Window, limit.MaxDelay), func(t *testing.T) {
			now := t0.Add(time.Duration(rng.Int64N(int64(time.Minute))))
			prefix := fmt.Sprintf("diff:%d:", rng.Int64())
			for i := range 600 {
				now = now.Add(time.Duration(rng.Int64N(int64(limit.Window / 4))))
				reqs := []algorithms.Request{{
					Key:   prefix + fmt.Sprint(rng.IntN(3)),
					Limit: limit,
					Cost:  randomCost(rng, limit.Capacity()),
				}}
				want, _ := memory.AllowAt(context.Background(), now, reqs)
				got, err := redisStore.AllowAt(context.Background(), now, reqs)
				if err != nil {
					t.Fatal(err)
				}
				if got[0] != want[0] {
					t.Fatalf("step %d (%s, cost %d): redis %+v, memory %+v", i, reqs[0].Key, reqs[0].Cost, got[0], want[0])
				}
			}
		})
	}
}

// randomCost is 1 to 3, or for a large capacity as often up to 40% of it,
// so that large limits are denied too.
func randomCost(rng *rand.Rand, capacity int64) int64 {
	if capacity < 10 || rng.IntN(2) == 0 {
		return 1 + rng.Int64N(3)
	}
	return 1 + rng.Int64N(capacity*2/5)
}

// TestConcurrentExactness: 200 concurrent requests for one key with a limit
// of 50 admit exactly 50, for each exact algorithm.
func TestConcurrentExactness(t *testing.T) {
	srv := redistest.Start(t)
	exact := []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindow, algorithms.SlidingLog, algorithms.TokenBucket}
	for name, store := range map[string]algorithms.Store{
		"redis":  New(srv.Client(t), Options{}),
		"memory": leasetwin.NewMemoryStore(),
	} {
		for _, alg := range exact {
			t.Run(name+"/"+string(alg), func(t *testing.T) {
				// an hour-long window: no refill and no window edge during the test
				limit := algorithms.Limit{Algorithm: alg, Events: 50, Window: time.Hour}
				reqs := []algorithms.Request{{Key: fmt.Sprintf("conc:%s:%d", alg, rand.Int64()), Limit: limit, Cost: 1}}
				if got, want := admitConcurrently(t, store, reqs, 200), int64(50); got != want {
					t.Errorf("admitted: got %d, want %d", got, want)
				}
			})
		}
	}
}

// admitConcurrently sends the same request n times at once and returns how
// many were admitted.
func admitConcurrently(t *testing.T, store algorithms.Store, reqs []algorithms.Request, n int) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			ds, err := store.Allow(context.Background(), reqs)
			if err != nil {
				t.Error(err)
				return
			}
			if algorithms.Admitted(reqs, ds) {
				admitted.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	return admitted.Load()
}

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
			m := leasetwin.NewMemoryStore()
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
	for name, s := range map[string]algorithms.Store{
		"memory": leasetwin.NewMemoryStore(),
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

func usedMemory(b *testing.B, c *redis.Client) int64 {
	b.Helper()
	info := redistest.ReadInfo(b, c, "memory")
	if _, ok := info["used_memory"]; !ok {
		b.Fatal("no used_memory in INFO memory")
	}
	return info.Int("used_memory")
}

// BenchmarkRedisBytesPerKey fills a fresh Redis with 10^5 keys of each
// algorithm (one request each, the key shape Sluice writes) and reports
// Redis's memory per key, from INFO used_memory and from MEMORY USAGE of
// one key. Run: go test -run '^$' -bench BytesPerKey -benchtime 1x ./redisstore
func BenchmarkRedisBytesPerKey(b *testing.B) {
	const keys = 100_000
	for _, alg := range []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindow, algorithms.SlidingLog, algorithms.TokenBucket} {
		b.Run(string(alg), func(b *testing.B) {
			for b.Loop() {
				srv := redistest.Start(b)
				client := srv.Client(b)
				store := New(client, Options{})
				limit := algorithms.Limit{Algorithm: alg, Events: 100, Window: time.Hour}
				before := usedMemory(b, client)
				ctx := context.Background()
				for i := range keys {
					// sluice:<zone>:{<22 base64 chars>}, as the handler writes
					key := fmt.Sprintf("sluice:api:{%022d}", i)
					if _, err := store.Allow(ctx, []algorithms.Request{{Key: key, Limit: limit, Cost: 1}}); err != nil {
						b.Fatal(err)
					}
				}
				after := usedMemory(b, client)
				usage, err := client.MemoryUsage(ctx, fmt.Sprintf("sluice:api:{%022d}", 0)).Result()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(after-before)/keys, "bytes/key")
				b.ReportMetric(float64(usage), "memory-usage-bytes")
				srv.Stop()
			}
		})
	}
}

// everyStore is the memory store and the Redis store through Functions
// and through scripts, as an S each: the stores a test drives alike.
func everyStore[S any](client *redis.Client) map[string]S {
	return map[string]S{
		"memory":  any(memoryAt{leasetwin.NewMemoryStore()}).(S),
		"redis":   any(New(client, Options{})).(S),
		"scripts": any(New(client, Options{Scripts: true})).(S),
	}
}
