package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/leasetwin"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// settlingStore is a store driven by a time parameter that also settles
// and takes quota lease give-backs.
type settlingStore interface {
	clockedStore
	SettleAt(ctx context.Context, now time.Time, ss []algorithms.Settlement) error
	GiveBackAt(ctx context.Context, now time.Time, gbs []algorithms.GiveBack) error
}

type memorySettleAt struct{ memoryAt }

func (m memorySettleAt) SettleAt(_ context.Context, now time.Time, ss []algorithms.Settlement) error {
	m.MemoryStore.SettleAt(now, ss)
	return nil
}

func (m memorySettleAt) GiveBackAt(_ context.Context, now time.Time, gbs []algorithms.GiveBack) error {
	m.MemoryStore.GiveBackAt(now, gbs)
	return nil
}

// settlingStores returns a fresh memory store and a Redis store on a new
// redis-server, both settling.
func settlingStores(t *testing.T) map[string]settlingStore {
	t.Helper()
	srv := redistest.Start(t)
	return map[string]settlingStore{
		"memory": memorySettleAt{memoryAt{leasetwin.NewMemoryStore()}},
		"redis":  New(srv.Client(t), Options{}),
	}
}

// settleOp is one step: a request of cost (when settle is 0), or a
// settlement of delta against the reservation of step `of`.
type settleOp struct {
	cost    int64
	of      int // index of the step whose reservation is settled
	delta   int64
	allowed bool
	// remaining after the request; -1: none left (0 or a debt below)
	remaining int64
}

// TestSettleRefundAndDebt: a refund gives the reservation back, a debt
// takes beyond the limit and denies what follows, and the debt is capped at
// one more limit, in both stores and for every counting algorithm.
func TestSettleRefundAndDebt(t *testing.T) {
	ops := []settleOp{
		{cost: 4, allowed: true, remaining: 6},
		{of: 0, delta: -4},
		{cost: 1, allowed: true, remaining: 9},
		{of: 2, delta: 14}, // count 15 of 10: a debt of 5
		{cost: 1, allowed: false, remaining: -1},
		{of: 2, delta: 1000}, // capped at 2 × 10
		{of: 2, delta: -14},  // 20 - 14 = 6 (without the cap: 1001)
		{cost: 4, allowed: true, remaining: 0},
		{cost: 1, allowed: false, remaining: -1},
	}
	algs := []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindow, algorithms.SlidingLog, algorithms.TokenBucket}
	for name, store := range settlingStores(t) {
		for _, alg := range algs {
			t.Run(name+"/"+string(alg), func(t *testing.T) {
				limit := algorithms.Limit{Algorithm: alg, Events: 10, Window: time.Minute}
				runSettleOps(t, store, limit, "settle:"+string(alg), ops)
			})
		}
	}
}

func runSettleOps(t *testing.T, store settlingStore, limit algorithms.Limit, key string, ops []settleOp) {
	t.Helper()
	ctx := context.Background()
	taken := make([]algorithms.Decision, len(ops))
	for i, op := range ops {
		if op.cost == 0 {
			s := algorithms.Settlement{Key: key, Limit: limit, At: taken[op.of].At, Delta: op.delta}
			if err := store.SettleAt(ctx, t0, []algorithms.Settlement{s}); err != nil {
				t.Fatalf("step %d: settling: %v", i, err)
			}
			continue
		}
		ds, err := store.AllowAt(ctx, t0, []algorithms.Request{{Key: key, Limit: limit, Cost: op.cost, Settles: true}})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		taken[i] = ds[0]
		remaining := ds[0].Remaining
		if op.remaining < 0 {
			remaining = min(remaining, -1)
		}
		if ds[0].Allowed != op.allowed || remaining != op.remaining && !(op.remaining < 0 && remaining <= 0) {
			t.Errorf("step %d: got allowed=%v remaining=%d, want %v %d", i, ds[0].Allowed, ds[0].Remaining, op.allowed, op.remaining)
		}
		if ds[0].Allowed && ds[0].At != t0.UnixMicro() {
			t.Errorf("step %d: got At %d, want %d", i, ds[0].At, t0.UnixMicro())
		}
	}
}

// TestConcurrencySlots: at most events slots at once; a given-back slot
// is free at once, and slots never given back expire after the window,
// in both stores.
func TestConcurrencySlots(t *testing.T) {
	const window = 10 * time.Second
	limit := algorithms.Limit{Algorithm: algorithms.Concurrency, Events: 2, Window: window}
	type op struct {
		at      time.Duration
		slot    string
		release bool
		allowed bool
		remain  int64 // after the request
	}
	ops := []op{
		{0, "a", false, true, 1},
		{0, "b", false, true, 0},
		{0, "c", false, false, 0},
		{time.Second, "a", true, false, 0},
		{time.Second, "c", false, true, 0},
		{2 * time.Second, "d", false, false, 0},
		{window + time.Second, "d", false, true, 1},                    // b expired; c lives until 11 s
		{window + time.Second + time.Microsecond, "e", false, true, 0}, // c expired at 11 s
	}
	for name, store := range settlingStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			key := "slots:" + name
			for i, o := range ops {
				now := t0.Add(o.at)
				if o.release {
					s := algorithms.Settlement{Key: key, Limit: limit, Slot: o.slot}
					if err := store.SettleAt(ctx, now, []algorithms.Settlement{s}); err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					continue
				}
				ds, err := store.AllowAt(ctx, now, []algorithms.Request{{Key: key, Limit: limit, Cost: 1, Slot: o.slot, Settles: true}})
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got := ds[0]; got.Allowed != o.allowed || got.Remaining != o.remain {
					t.Errorf("step %d: got allowed=%v remaining=%d, want %v %d", i, got.Allowed, got.Remaining, o.allowed, o.remain)
				}
				if !ds[0].Allowed && ds[0].RetryAfter != time.Second {
					t.Errorf("step %d: got retry %v, want 1s", i, ds[0].RetryAfter)
				}
			}
		})
	}
}

// TestClusterSettle: settlements of keys in different slots settle each
// on its own node, a concurrency slot and a refund in one call.
func TestClusterSettle(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	store := New(cluster.Client(t), Options{})
	ctx := context.Background()
	counted := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 3, Window: time.Hour}
	concurrent := algorithms.Limit{Algorithm: algorithms.Concurrency, Events: 1, Window: time.Hour}
	reqs := []algorithms.Request{
		// hash tags {a} and {b}: slots on different masters
		{Key: "settle:counted:{a}", Limit: counted, Cost: 3, Settles: true},
		{Key: "settle:concurrent:{b}", Limit: concurrent, Cost: 1, Slot: "slot-1", Settles: true},
	}
	first, err := store.Allow(ctx, reqs)
	if err != nil || !algorithms.Admitted(reqs, first) {
		t.Fatalf("first request: got %v %v, want admitted", first, err)
	}
	if ds, _ := store.Allow(ctx, reqs); algorithms.Admitted(reqs, ds) {
		t.Fatal("second request: got admitted, want denied (both zones full)")
	}
	ss := []algorithms.Settlement{
		{Key: reqs[0].Key, Limit: counted, At: first[0].At, Delta: -3},
		{Key: reqs[1].Key, Limit: concurrent, Slot: "slot-1"},
	}
	if err := store.Settle(ctx, ss); err != nil {
		t.Fatal(err)
	}
	reqs[1].Slot = "slot-2"
	ds, err := store.Allow(ctx, reqs)
	if err != nil || !algorithms.Admitted(reqs, ds) {
		t.Fatalf("after settling: got %v %v, want admitted", ds, err)
	}
}

// TestConcurrencyAllOrNothing: a concurrency slot is taken only when every
// zone admits: when another zone denies, no slot is held, on one node and
// on Cluster (where the slot, taken by its key's own call, is given back).
func TestConcurrencyAllOrNothing(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	srv := redistest.Start(t)
	stores := map[string]algorithms.Store{
		"memory":  leasetwin.NewMemoryStore(),
		"redis":   New(srv.Client(t), Options{}),
		"cluster": New(cluster.Client(t), Options{}),
	}
	concurrent := algorithms.Limit{Algorithm: algorithms.Concurrency, Events: 10, Window: time.Hour}
	tight := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Hour}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			for i, want := range []bool{true, false, false, false} {
				reqs := []algorithms.Request{
					{Key: "aon:concurrent:{a}", Limit: concurrent, Cost: 1, Slot: fmt.Sprint("slot-", i), Settles: true},
					{Key: "aon:tight:{b}", Limit: tight, Cost: 1, Settles: true},
				}
				ds, err := store.Allow(ctx, reqs)
				if err != nil {
					t.Fatal(err)
				}
				if got := algorithms.Admitted(reqs, ds); got != want {
					t.Fatalf("request %d: got admitted=%v, want %v", i, got, want)
				}
			}
			ds, err := store.Allow(ctx, []algorithms.Request{{Key: "aon:concurrent:{a}", Limit: concurrent, Cost: 1, Slot: "last", Settles: true}})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ds[0].Remaining, int64(8); got != want {
				t.Errorf("slots free after three denied requests and two admitted: got %d, want %d", got, want)
			}
		})
	}
}

// TestRefundUnderSmallerLimitKeepsCount: a refund settled under a smaller
// limit than the one its key's count was reached under (a per-request
// limit, a give-back under a zone's own limit while an override was in
// force) takes only its units off: no cap lowers a count below what was
// admitted. (A cap of twice the settlement's limit once cut a count of
// 500 to 200, letting 300 more through.)
func TestRefundUnderSmallerLimitKeepsCount(t *testing.T) {
	for name, store := range settlingStores(t) {
		for _, alg := range []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindow, algorithms.SlidingLog, algorithms.TokenBucket} {
			t.Run(name+"/"+string(alg), func(t *testing.T) {
				ctx := context.Background()
				big := algorithms.Limit{Algorithm: alg, Events: 1000, Window: time.Hour}
				key := fmt.Sprintf("refund:%s:{%d}", alg, rand.Int64())
				var at int64
				for range 5 {
					ds, err := store.AllowAt(ctx, t0, []algorithms.Request{{Key: key, Limit: big, Cost: 100}})
					if err != nil || !ds[0].Allowed {
						t.Fatalf("admitting 100: %+v, %v", ds, err)
					}
					at = ds[0].At
				}
				small := big
				small.Events = 100
				if err := store.SettleAt(ctx, t0, []algorithms.Settlement{{Key: key, Limit: small, At: at, Delta: -1}}); err != nil {
					t.Fatal(err)
				}
				ds, err := store.AllowAt(ctx, t0, []algorithms.Request{{Key: key, Limit: big, Cost: 1}})
				if err != nil {
					t.Fatal(err)
				}
				if got, want := ds[0].Remaining, int64(1000-500+1-1); got != want {
					t.Errorf("remaining after a refund of 1 under a limit of 100: got %d, want %d", got, want)
				}
			})
		}
	}
}
