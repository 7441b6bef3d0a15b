package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestClusterAllOrNothing: on Redis Cluster the zones of one request live
// in different slots; when one denies, the others are refunded, for every
// algorithm.
func TestClusterAllOrNothing(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	store := New(cluster.Client(t), Options{})
	tight := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Hour}
	for _, alg := range []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindow, algorithms.SlidingLog, algorithms.TokenBucket} {
		t.Run(string(alg), func(t *testing.T) {
			ctx := context.Background()
			loose := algorithms.Limit{Algorithm: alg, Events: 10, Window: time.Hour}
			id := rand.Int64()
			reqs := []algorithms.Request{
				// hash tags {a} and {b}: slots 15495 and 3300, on different masters
				{Key: fmt.Sprintf("loose:%d:{a}", id), Limit: loose, Cost: 2},
				{Key: fmt.Sprintf("tight:%d:{b}", id), Limit: tight, Cost: 1},
			}
			for i, want := range []bool{true, false, false, false} {
				ds, err := store.Allow(ctx, reqs)
				if err != nil {
					t.Fatal(err)
				}
				if got := algorithms.Admitted(reqs, ds); got != want {
					t.Fatalf("request %d: got admitted=%v, want %v", i, got, want)
				}
				if !want && ds[0].Remaining != 8 {
					t.Errorf("request %d: loose zone reports remaining %d, want 8", i, ds[0].Remaining)
				}
			}
			ds, err := store.Allow(ctx, reqs[:1])
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ds[0].Remaining, int64(6); got != want {
				t.Errorf("loose zone after three refunded denials: remaining %d, want %d", got, want)
			}
		})
	}
}

// TestClusterConcurrentExactness: 200 concurrent two-zone requests on
// Cluster; the tight zone admits exactly its limit and the loose zone keeps
// exactly what the admitted requests took, refunds included.
func TestClusterConcurrentExactness(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	store := New(cluster.Client(t), Options{})
	id := rand.Int64()
	loose := algorithms.Request{Key: fmt.Sprintf("loose:%d:{a}", id), Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1000, Window: time.Hour}, Cost: 1}
	tight := algorithms.Request{Key: fmt.Sprintf("tight:%d:{b}", id), Limit: algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: 50, Window: time.Hour}, Cost: 1}
	reqs := []algorithms.Request{loose, tight}
	if got, want := admitConcurrently(t, store, reqs, 200), int64(50); got != want {
		t.Errorf("admitted: got %d, want %d", got, want)
	}
	ds, err := store.Allow(context.Background(), []algorithms.Request{loose})
	if err != nil {
		t.Fatal(err)
	}
	// 1000 - 50 admitted - this request; a unit may have refilled (one per 3.6 s)
	if got := ds[0].Remaining; got < 949 || got > 950 {
		t.Errorf("loose zone remaining: got %d, want 949 (950 if a token refilled)", got)
	}
}

// TestClusterBatchedExactness: on Redis Cluster a batch is split by slot
// and the calls pipelined to their nodes. 3 stores × 200 concurrent
// requests over 20 keys in many slots admit exactly each key's limit; then
// a FUNCTION FLUSH on every master is recovered from by itself.
func TestClusterBatchedExactness(t *testing.T) {
	const instances, perInstance, keys, perKey = 3, 200, 20, 7
	cluster := redistest.StartCluster(t, 3)
	stores := make([]*Store, instances)
	for i := range stores {
		stores[i] = New(cluster.Client(t), Options{})
	}
	id := rand.Int64()
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: perKey, Window: time.Hour}
	reqs := func(k int) []algorithms.Request {
		return []algorithms.Request{{Key: fmt.Sprintf("cb:%d:{k%d}", id, k), Limit: limit, Cost: 1}}
	}
	admitted := admitPerKey(t, stores, instances*perInstance, keys, reqs)
	for k, got := range admitted {
		if got != perKey {
			t.Errorf("key %d admitted: got %d, want %d", k, got, perKey)
		}
	}

	ctx := context.Background()
	functions := redistest.ServerVersion(t).Functions()
	for _, s := range cluster.Servers {
		c := s.Client(t)
		err := c.ScriptFlush(ctx).Err() // no Functions (Redis 6): EVALSHA's cache
		if functions {
			err = c.FunctionFlush(ctx).Err()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	ds, err := stores[0].Allow(ctx, reqs(keys+1))
	if err != nil || !ds[0].Allowed {
		t.Errorf("after FUNCTION FLUSH (SCRIPT FLUSH) on every master: got %+v, %v, want admitted", ds, err)
	}
}

// TestClusterRefundLargeBucket: the refund of a token bucket stored in the
// large format ("<events> <fraction> <time>") gives back exactly the cost,
// as the refund of a small one does.
func TestClusterRefundLargeBucket(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	store := New(cluster.Client(t), Options{})
	ctx := context.Background()
	id := rand.Int64()
	// one token a year back: no refill during the test
	loose := algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1, Window: algorithms.MaxWindow, Burst: 1_000_000_000}
	tight := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Hour}
	reqs := []algorithms.Request{
		{Key: fmt.Sprintf("loose:%d:{a}", id), Limit: loose, Cost: 2},
		{Key: fmt.Sprintf("tight:%d:{b}", id), Limit: tight, Cost: 1},
	}
	for i, want := range []bool{true, false, false, false} {
		ds, err := store.Allow(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		if got := algorithms.Admitted(reqs, ds); got != want {
			t.Fatalf("request %d: got admitted=%v, want %v", i, got, want)
		}
	}
	ds, err := store.Allow(ctx, reqs[:1])
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ds[0].Remaining, int64(1_000_000_000-4); got != want {
		t.Errorf("loose zone after three refunded denials: remaining %d, want %d", got, want)
	}
}

// oomNode makes the master of key refuse writes (maxmemory 1 byte, no
// eviction) until the test ends.
func oomNode(t *testing.T, client *redis.ClusterClient, key string) {
	t.Helper()
	ctx := context.Background()
	node, err := client.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := node.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := node.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.ConfigSet(ctx, "maxmemory", "0").Err() })
}

// TestClusterDenialWinsOverFailure: on Cluster, when one zone's slot fails
// and another zone denied, the request is denied without an error, so that
// failure_mode open cannot admit a request over a spent zone; with no
// denial, the failure is reported.
func TestClusterDenialWinsOverFailure(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	client := cluster.Client(t)
	store := New(client, Options{})
	ctx := context.Background()
	tests := []struct {
		name      string
		events    int64 // of the healthy zone, already spent once
		wantError bool
	}{
		{"spent zone denies", 1, false},
		{"healthy zone admits", 10, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := rand.Int64()
			failing := algorithms.Request{Key: fmt.Sprintf("failing:%d:{a}", id), Cost: 1,
				Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 10, Window: time.Hour}}
			healthy := algorithms.Request{Key: fmt.Sprintf("healthy:%d:{b}", id), Cost: 1,
				Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: tt.events, Window: time.Hour}}
			if _, err := store.Allow(ctx, []algorithms.Request{healthy}); err != nil {
				t.Fatal(err)
			}
			oomNode(t, client, failing.Key)
			reqs := []algorithms.Request{failing, healthy}
			ds, err := store.Allow(ctx, reqs)
			if got := err != nil; got != tt.wantError {
				t.Fatalf("error: got %v, want an error: %v", err, tt.wantError)
			}
			if err == nil && algorithms.Admitted(reqs, ds) {
				t.Error("a request over a spent zone was admitted")
			}
			after, err := store.Peek(ctx, []algorithms.Request{healthy})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := after[0].Remaining, tt.events-1; got != want {
				t.Errorf("healthy zone after the failed request: got remaining %d, want %d (refunded)", got, want)
			}
		})
	}
}

// refundHook records the deadlines of the refund calls.
type refundHook struct {
	mu        sync.Mutex
	deadlines []time.Duration // until the deadline at the call; -1: none
}

func (h *refundHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *refundHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *refundHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		for _, a := range cmd.Args() {
			if s, ok := a.(*string); ok && strings.HasPrefix(*s, modeSettle+" ") { // a refund is a settlement
				left := time.Duration(-1)
				if deadline, ok := ctx.Deadline(); ok {
					left = time.Until(deadline)
				}
				h.mu.Lock()
				h.deadlines = append(h.deadlines, left)
				h.mu.Unlock()
			}
		}
		return next(ctx, cmd)
	}
}

// TestClusterRefundHasDeadline: a refund does not wait on the request's
// context, which a leaving client may end, but it has a deadline of its
// own: the refund timeout.
func TestClusterRefundHasDeadline(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	client := cluster.Client(t)
	hook := new(refundHook)
	client.AddHook(hook)
	const timeout = 250 * time.Millisecond
	store := New(client, Options{RefundTimeout: timeout})
	id := rand.Int64()
	reqs := []algorithms.Request{
		{Key: fmt.Sprintf("loose:%d:{a}", id), Cost: 1, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 10, Window: time.Hour}},
		{Key: fmt.Sprintf("tight:%d:{b}", id), Cost: 1, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Hour}},
	}
	if _, err := store.Allow(context.Background(), reqs[1:]); err != nil { // spends tight
		t.Fatal(err)
	}
	if _, err := store.Allow(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if got, want := len(hook.deadlines), 1; got != want {
		t.Fatalf("refund calls: got %d, want %d", got, want)
	}
	if left := hook.deadlines[0]; left <= 0 || left > timeout {
		t.Errorf("refund deadline: got %v ahead (-1: none), want within %v", left, timeout)
	}
}

// TestKeySlot: the slots Redis Cluster itself reports (CLUSTER KEYSLOT).
func TestKeySlot(t *testing.T) {
	tests := []struct {
		key  string
		want uint16
	}{
		{"foo", 12182},
		{"a", 15495},
		{"loose:1:{a}", 15495},
		{"tight:1:{b}", 3300},
		{"{}x", 10595},    // empty tag: the whole key
		{"x{}{a}", 15756}, // the first tag only, even if empty
		{"", 0},
	}
	for _, tt := range tests {
		if got := keySlot(tt.key); got != tt.want {
			t.Errorf("keySlot(%q): got %d, want %d", tt.key, got, tt.want)
		}
	}
}
