package algorithms_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// commandCalls is how many times Redis ran each of the commands named
// (lower case, e.g. "fcall"), from INFO commandstats.
func commandCalls(tb testing.TB, c *redis.Client, names ...string) int64 {
	tb.Helper()
	return commandStat(tb, c, "calls", names...)
}

// commandStat sums one field of INFO commandstats ("calls", "usec") over
// the commands named.
func commandStat(tb testing.TB, c *redis.Client, field string, names ...string) int64 {
	tb.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\r\n") {
		for _, name := range names {
			stats, ok := strings.CutPrefix(line, "cmdstat_"+name+":")
			if !ok {
				continue
			}
			for _, kv := range strings.Split(stats, ",") {
				if v, ok := strings.CutPrefix(kv, field+"="); ok {
					n, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						tb.Fatalf("commandstats line %q: %v", line, err)
					}
					total += n
				}
			}
		}
	}
	return total
}

// TestBatchedExactness: 3 stores (3 Caddy instances, each its own client
// and batcher) × 200 concurrent two-zone requests over 20 keys, every
// request also in one shared zone. Batching on, each key admits exactly
// its limit, the shared zone exactly its own, and a denied request consumed
// nothing: each key's remaining quota is its limit less what it admitted.
func TestBatchedExactness(t *testing.T) {
	const instances, perInstance, keys, perKey, shared = 3, 200, 20, 7, 100
	srv := redistest.Start(t)
	stores := make([]*algorithms.RedisStore, instances)
	for i := range stores {
		stores[i] = algorithms.NewRedisStore(srv.Client(t))
	}
	for _, alg := range []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingLog, algorithms.TokenBucket} {
		t.Run(string(alg), func(t *testing.T) {
			id := rand.Int64()
			limit := algorithms.Limit{Algorithm: alg, Events: perKey, Window: time.Hour}
			global := algorithms.Request{Key: fmt.Sprintf("exact:%d:global", id), Limit: algorithms.Limit{Algorithm: alg, Events: shared, Window: time.Hour}, Cost: 1}
			reqs := func(k int) []algorithms.Request {
				return []algorithms.Request{{Key: fmt.Sprintf("exact:%d:%d", id, k), Limit: limit, Cost: 1}, global}
			}
			admitted := admitPerKey(t, stores, instances*perInstance, keys, reqs)
			var total int64
			for k, got := range admitted {
				total += got
				if got > perKey {
					t.Errorf("key %d admitted: got %d, want at most %d", k, got, perKey)
				}
				ds, err := stores[0].Peek(context.Background(), reqs(k)[:1])
				if err != nil {
					t.Fatal(err)
				}
				if got, want := ds[0].Remaining, perKey-admitted[k]; got != want {
					t.Errorf("key %d remaining: got %d, want %d (denied requests consumed)", k, got, want)
				}
			}
			// demand is 30 per key and 600 in all: the shared zone binds
			if got, want := total, int64(shared); got != want {
				t.Errorf("admitted in all: got %d, want %d", got, want)
			}
		})
	}
}

// TestOneCallDecidesMany: 32 callers in a loop share calls; Redis runs at
// most one call per four decisions (INFO commandstats).
func TestOneCallDecidesMany(t *testing.T) {
	const callers, each = 32, 200
	srv := redistest.Start(t)
	client := srv.Client(t)
	for _, tt := range []struct {
		name    string
		opts    algorithms.RedisOptions
		command string
	}{
		{"functions", algorithms.RedisOptions{}, "fcall"},
		{"scripts", algorithms.RedisOptions{Scripts: true}, "evalsha"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if v := redistest.ServerVersion(t); !v.Functions() {
				tt.command = "evalsha" // the store falls back to it
			}
			store := algorithms.NewRedisStoreWith(srv.Client(t), tt.opts)
			if err := store.Warm(context.Background()); err != nil {
				t.Fatal(err)
			}
			limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1 << 40, Window: time.Hour}
			before := commandCalls(t, client, tt.command)
			var wg sync.WaitGroup
			for c := range callers {
				wg.Go(func() {
					for i := range each {
						reqs := []algorithms.Request{{Key: fmt.Sprintf("many:%d:%d", c, i%10), Limit: limit, Cost: 1}}
						ds, err := store.Allow(context.Background(), reqs)
						if err != nil || !ds[0].Allowed {
							t.Errorf("caller %d request %d: got %+v, %v, want admitted", c, i, ds, err)
							return
						}
					}
				})
			}
			wg.Wait()
			calls := commandCalls(t, client, tt.command) - before
			perDecision := float64(calls) / (callers * each)
			t.Logf("%s: %d calls for %d decisions (%.3f per decision)", tt.command, calls, callers*each, perDecision)
			if calls == 0 || perDecision > 0.25 {
				t.Errorf("%s calls per decision: got %.3f (%d calls), want in (0, 0.25]", tt.command, perDecision, calls)
			}
		})
	}
}

// TestIdleStoreSendsAtOnce: a lone request is its own call; nothing waits
// for company.
func TestIdleStoreSendsAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	store := algorithms.NewRedisStore(client)
	if err := store.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	limit := algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 100, Window: time.Hour}
	before := commandCalls(t, client, "fcall", "evalsha", "eval")
	for i := range 20 {
		ds, err := store.Allow(context.Background(), []algorithms.Request{{Key: "idle", Limit: limit, Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ds[0].Remaining, int64(99-i); got != want {
			t.Fatalf("request %d: got remaining %d, want %d", i, got, want)
		}
	}
	if got, want := commandCalls(t, client, "fcall", "evalsha", "eval")-before, int64(20); got != want {
		t.Errorf("calls for 20 sequential requests: got %d, want %d", got, want)
	}
}

// TestCancelledCallerStopsWaiting: a caller whose context ends while its
// request waits in the queue returns at once with the context's error, and
// the store goes on deciding for the others.
func TestCancelledCallerStopsWaiting(t *testing.T) {
	srv := redistest.Start(t)
	store := algorithms.NewRedisStoreWith(srv.Client(t), algorithms.RedisOptions{InFlight: 1})
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1 << 40, Window: time.Hour}
	reqs := []algorithms.Request{{Key: fmt.Sprint("cancel:", rand.Int64()), Limit: limit, Cost: 1}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := store.Allow(ctx, reqs); err != context.Canceled {
		t.Fatalf("cancelled caller: got %v, want %v", err, context.Canceled)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		ctx, cancel := context.WithCancel(context.Background())
		if i%2 == 1 {
			cancel() // half give up at once, some while queued
		}
		wg.Go(func() {
			defer cancel()
			_, err := store.Allow(ctx, reqs)
			if i%2 == 0 && err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("caller that did not cancel: got %v, want no error", err)
	}
	if ds, err := store.Allow(context.Background(), reqs); err != nil || !ds[0].Allowed {
		t.Errorf("after the cancellations: got %+v, %v, want admitted", ds, err)
	}
}

// admitPerKey sends calls concurrent requests, request i to store
// i % len(stores) for key i % keys, all released at once, and returns how
// many each key admitted.
func admitPerKey(t *testing.T, stores []*algorithms.RedisStore, calls, keys int, reqs func(k int) []algorithms.Request) []int64 {
	t.Helper()
	var mu sync.Mutex
	admitted := make([]int64, keys)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range calls {
		wg.Go(func() {
			<-start
			r := reqs(i % keys)
			ds, err := stores[i%len(stores)].Allow(context.Background(), r)
			if err != nil {
				t.Error(err)
				return
			}
			if algorithms.Admitted(r, ds) {
				mu.Lock()
				admitted[i%keys]++
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	return admitted
}
