package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/leasetwin"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

type overridingStore interface {
	clockedStore
	SetOverrideAt(ctx context.Context, now time.Time, key string, o algorithms.Override, ttl time.Duration) error
	ClearOverride(ctx context.Context, key string) error
}

func (m memoryAt) SetOverrideAt(_ context.Context, now time.Time, key string, o algorithms.Override, ttl time.Duration) error {
	return m.MemoryStore.SetOverrideAt(now, key, o, ttl)
}

// TestOverrides drives the same steps on the memory store and on Redis
// (Functions and scripts), which must agree on every value: an override
// raises and lowers a key's limit mid-window, ends at expires_in on the
// store's clock, ends when cleared, and a zone without overrides never
// reads one.
func TestOverrides(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	stores := everyStore[overridingStore](client)
	type step struct {
		at        time.Duration
		set       *algorithms.Override // set before the request (ttl below); zero Events: clear
		ttl       time.Duration
		allowed   bool
		remaining int64
		override  algorithms.Override // the decision's
	}
	o := func(e, b int32) *algorithms.Override { return &algorithms.Override{Events: e, Burst: b} }
	tests := []struct {
		name  string
		limit algorithms.Limit
		plain bool // the zone has no overrides
		steps []step
	}{
		{"fixed_window", algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 2, Window: time.Minute}, false, []step{
			{0, nil, 0, true, 1, algorithms.Override{}},
			{time.Second, nil, 0, true, 0, algorithms.Override{}},
			{2 * time.Second, nil, 0, false, 0, algorithms.Override{}},
			{3 * time.Second, o(5, 0), 0, true, 2, algorithms.Override{Events: 5, Burst: 5}},   // raised mid-window
			{4 * time.Second, o(1, 0), 0, false, -2, algorithms.Override{Events: 1, Burst: 1}}, // lowered: 3 used of 1
			{5 * time.Second, &algorithms.Override{}, 0, false, -1, algorithms.Override{}},     // cleared: 3 of 2
			{6 * time.Second, o(10, 0), 10 * time.Second, true, 6, algorithms.Override{Events: 10, Burst: 10}},
			{15 * time.Second, nil, 0, true, 5, algorithms.Override{Events: 10, Burst: 10}},
			{16 * time.Second, nil, 0, false, -3, algorithms.Override{}}, // expired at 16s: 5 used of 2
			{time.Minute, nil, 0, true, 1, algorithms.Override{}},
		}},
		{"token_bucket", algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1, Window: time.Hour, Burst: 2}, false, []step{
			{0, nil, 0, true, 1, algorithms.Override{}},
			{0, nil, 0, true, 0, algorithms.Override{}},
			{0, nil, 0, false, 0, algorithms.Override{}},
			{0, o(1, 5), 0, true, 2, algorithms.Override{Events: 1, Burst: 5}},
			{0, o(3, 0), 0, false, 0, algorithms.Override{Events: 3, Burst: 3}}, // burst defaults to events
		}},
		{"plain zone ignores an override", algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 2, Window: time.Minute}, true, []step{
			{0, o(100, 0), 0, true, 1, algorithms.Override{}},
			{0, nil, 0, true, 0, algorithms.Override{}},
			{0, nil, 0, false, 0, algorithms.Override{}},
		}},
	}
	for _, tt := range tests {
		for name, s := range stores {
			t.Run(tt.name+"/"+name, func(t *testing.T) {
				ctx := context.Background()
				key := fmt.Sprintf("ov:{%d}", rand.Int64())
				for i, st := range tt.steps {
					now := t0.Add(st.at)
					if st.set != nil {
						var err error
						if st.set.Set() {
							err = s.SetOverrideAt(ctx, now, key, *st.set, st.ttl)
						} else {
							err = s.ClearOverride(ctx, key)
						}
						if err != nil {
							t.Fatalf("step %d: %v", i, err)
						}
					}
					ds, err := s.AllowAt(ctx, now, []algorithms.Request{{Key: key, Limit: tt.limit, Cost: 1, Overrides: !tt.plain}})
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					d := ds[0]
					if d.Allowed != st.allowed || d.Remaining != st.remaining || d.Override != st.override {
						t.Errorf("step %d at %v: got allowed=%v remaining=%d override=%+v, want %v %d %+v",
							i, st.at, d.Allowed, d.Remaining, d.Override, st.allowed, st.remaining, st.override)
					}
				}
			})
		}
	}
}

// TestOverrideCostAboveCapacity: a lowered override below a request's cost
// denies it without touching state, on both stores alike.
func TestOverrideCostAboveCapacity(t *testing.T) {
	srv := redistest.Start(t)
	for name, s := range map[string]overridingStore{"memory": memoryAt{leasetwin.NewMemoryStore()}, "redis": New(srv.Client(t), Options{})} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			key := fmt.Sprintf("ovc:{%d}", rand.Int64())
			limit := algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 10, Window: time.Minute}
			if err := s.SetOverrideAt(ctx, t0, key, algorithms.Override{Events: 2}, 0); err != nil {
				t.Fatal(err)
			}
			ds, err := s.AllowAt(ctx, t0, []algorithms.Request{{Key: key, Limit: limit, Cost: 3, Overrides: true}})
			if err != nil {
				t.Fatal(err)
			}
			if ds[0].Allowed || ds[0].Override.Events != 2 {
				t.Fatalf("cost 3 under an override of 2: got %+v, want denied, override 2", ds[0])
			}
			ds, _ = s.AllowAt(ctx, t0, []algorithms.Request{{Key: key, Limit: limit, Cost: 2, Overrides: true}})
			if !ds[0].Allowed || ds[0].Remaining != 0 {
				t.Fatalf("cost 2 after: got %+v, want admitted, remaining 0 (nothing taken before)", ds[0])
			}
		})
	}
}

// TestOverrideEncoding: a zone without overrides sends the very arguments
// and keys it always has; a zone with them only renames its algorithm.
func TestOverrideEncoding(t *testing.T) {
	limit := algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 10, Window: time.Second, Burst: 20}
	plain := algorithms.Request{Key: "p:{a}", Limit: limit, Cost: 1}
	c := encode([]*pending{{mode: modeConsume, now: "", reqs: []algorithms.Request{plain}}})
	wantArgs := []string{"1  1 token_bucket 10 1000000 20 1 0  0"}
	if !reflect.DeepEqual(argStrings(c), wantArgs) || !reflect.DeepEqual(c.keys, []string{"p:{a}"}) {
		t.Fatalf("plain zone: got keys %q args %#v, want [p:{a}] %#v", c.keys, argStrings(c), wantArgs)
	}
	over := plain
	over.Overrides = true
	c = encode([]*pending{{mode: modeConsume, now: "", reqs: []algorithms.Request{over}}})
	wantArgs = []string{"1  1 token_bucket:o 10 1000000 20 1 0  0"}
	if !reflect.DeepEqual(argStrings(c), wantArgs) || !reflect.DeepEqual(c.keys, []string{"p:{a}"}) {
		t.Fatalf("zone with overrides: got keys %q args %#v, want %#v", c.keys, argStrings(c), wantArgs)
	}
	if got := replyWidth(&pending{mode: modeConsume, reqs: []algorithms.Request{plain, over}}); got != 2*zoneReplyWidth+overrideReplyWidth {
		t.Fatalf("reply width: got %d", got)
	}
	ds := decisions([]algorithms.Request{plain, over}, []int64{2*3 + 1, 0, 5, 6, 2*4 + 1, 0, 7, 8, 50, 60}, 9)
	if ds[0].Override.Set() || ds[1].Override != (algorithms.Override{Events: 50, Burst: 60}) || ds[1].Remaining != 4 || ds[0].Remaining != 3 {
		t.Fatalf("decisions: got %+v", ds)
	}
}

// TestOverridesOnCluster: the override lives in its key's slot, and a
// request of two zones in different slots, one with overrides, is decided
// with it (and refunded in the other slot when it denies).
func TestOverridesOnCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	store := New(cluster.Client(t), Options{})
	ctx := context.Background()
	id := rand.Int64()
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Hour}
	reqs := []algorithms.Request{
		{Key: fmt.Sprintf("ovc:%d:{a}", id), Limit: limit, Cost: 1, Overrides: true},
		{Key: fmt.Sprintf("plain:%d:{b}", id), Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 10, Window: time.Hour}, Cost: 1},
	}
	if err := store.SetOverride(ctx, reqs[0].Key, algorithms.Override{Events: 3}, time.Hour); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, true, true, false} {
		ds, err := store.Allow(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		if got := algorithms.Admitted(reqs, ds); got != want || ds[0].Override.Events != 3 {
			t.Fatalf("request %d: admitted=%v override %+v, want %v and 3", i+1, got, ds[0].Override, want)
		}
	}
	ds, err := store.Peek(ctx, reqs[1:])
	if err != nil {
		t.Fatal(err)
	}
	if ds[0].Remaining != 7 {
		t.Errorf("the other slot's zone: remaining %d, want 7 (the denied request refunded)", ds[0].Remaining)
	}
}
