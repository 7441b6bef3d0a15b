package quota

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/leasetwin"
)

func TestQuotaLeasesAdmitWithoutTheStore(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	r := leasing("k", 100_000)
	grant := f.warm(t, r)[0]
	leased := 0
	for range 20 {
		f.clock.Advance(time.Millisecond)
		before := f.store.requests.Load()
		d := f.allow(t, r)[0]
		if !d.Allowed {
			t.Fatalf("denied: %+v", d)
		}
		calls := f.store.requests.Load() - before
		if d.Leased {
			leased++
			if calls != 0 {
				t.Fatalf("a leased admission made %d store calls", calls)
			}
			if want := r.Limit.Events - f.store.used(t, r) + f.left("k"); d.Remaining != want {
				t.Errorf("leased decision's Remaining %d, want %d (the store's, and the units leased not yet used)", d.Remaining, want)
			}
			if d.At <= grant.At || d.Quota.Units == 0 || d.ResetAfter >= grant.ResetAfter {
				t.Errorf("leased decision %+v: want At after the grant's %d, its grant, ResetAfter counted down from the grant's", d, grant.At)
			}
		} else if calls != 1 {
			t.Fatalf("a store admission made %d store calls", calls)
		}
	}
	if leased == 0 {
		t.Fatal("no request was admitted from a lease")
	}
	if got := f.events.get(LeaseUsed); got != int64(leased) {
		t.Errorf("observed %d units used, want %d", got, leased)
	}
}

// Take decides from held leases alone: a request every zone of which
// holds one is admitted with no store call, as Allow admits it; any other
// gets nil, with no call, no unit taken and no demand recorded (Allow,
// which decides it next, records it once).
func TestQuotaLeasesTake(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	ip1, ip2, static := leasing("ip1", 100_000), leasing("ip2", 100_000), leasing("static", 100_000)
	f.warm(t, ip1, static)
	demand := func(key string) int64 {
		sh := &f.q.shards[f.q.shardOf(key)]
		sh.mu.Lock()
		defer sh.mu.Unlock()
		return sh.find(key).demand.cur
	}
	before, left, was, used := f.store.requests.Load(), f.left("static"), demand("static"), f.events.get(LeaseUsed)
	if ds := f.q.Take([]algorithms.Request{static, ip2}); ds != nil { // static's lease is taken from first; ip2 holds none
		t.Fatalf("Take decided a request with a zone without a lease: %+v", ds)
	}
	if got := f.store.requests.Load(); got != before {
		t.Errorf("Take made %d store calls", got-before)
	}
	if got := f.left("static"); got != left {
		t.Errorf("static's lease has %d left after Take declined, want %d", got, left)
	}
	if got := demand("static"); got != was {
		t.Errorf("static's demand %d after Take declined, want %d: Allow would count the request twice", got, was)
	}
	ds := f.q.Take([]algorithms.Request{ip1, static})
	f.q.calls.Wait()
	if len(ds) != 2 || !ds[0].Leased || !ds[1].Leased || !ds[0].Allowed || !ds[1].Allowed {
		t.Fatalf("Take with leases in every zone: %+v, want both admitted from them", ds)
	}
	if got := f.store.requests.Load(); got != before { // a renewal it started is no request
		t.Errorf("a leased Take made %d store requests", got-before)
	}
	if got := demand("static"); got != was+1 {
		t.Errorf("static's demand %d after a leased admission, want %d", got, was+1)
	}
	if got := f.events.get(LeaseUsed) - used; got != 2 {
		t.Errorf("observed %d units used, want 2", got)
	}
}

func TestQuotaLeasesResetAndOverrideDropLeases(t *testing.T) {
	for name, change := range map[string]func(q *Leases) error{
		"reset": func(q *Leases) error { return q.Reset(context.Background(), "k") },
		"override": func(q *Leases) error {
			return q.SetOverride(context.Background(), "k", algorithms.Override{Events: 50}, 0)
		},
		"clear override": func(q *Leases) error { return q.ClearOverride(context.Background(), "k") },
	} {
		t.Run(name, func(t *testing.T) {
			f := newLeaseFixture(t, DefaultKeys)
			r := leasing("k", 100_000)
			f.warm(t, r)
			if err := change(f.q); err != nil {
				t.Fatal(err)
			}
			if f.left("k") != 0 {
				t.Error("leases held after the change")
			}
			before := f.store.requests.Load()
			if d := f.allow(t, r)[0]; d.Leased || f.store.requests.Load() != before+1 {
				t.Error("a request was admitted from a lease of before the change")
			}
		})
	}
}

func TestQuotaLeasesCloseGivesBackEverything(t *testing.T) {
	f := newLeaseFixture(t, DefaultKeys)
	a, b := leasing("a", 100_000), leasing("b", 100_000)
	f.warmBoth(t, a, b)
	admittedA, admittedB := f.store.used(t, a)-f.left("a"), f.store.used(t, b)-f.left("b")
	if err := f.q.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := len(f.store.giveBacks()), 2; got != want {
		t.Errorf("%d give-backs, want %d", got, want)
	}
	if got := f.store.used(t, a); got != admittedA {
		t.Errorf("a: the store counts %d, want %d", got, admittedA)
	}
	if got := f.store.used(t, b); got != admittedB {
		t.Errorf("b: the store counts %d, want %d", got, admittedB)
	}
	before := f.store.requests.Load()
	if d := f.allow(t, a)[0]; d.Leased || f.store.requests.Load() != before+1 {
		t.Errorf("after Close: leased %v, store calls %d, want the store's decision", d.Leased, f.store.requests.Load()-before)
	}
}

// Many goroutines on two instances, each with its own Leases on the
// real clock over one store, a per-goroutine zone beside a shared one:
// the shared zone never admits more than its limit, and the store never
// counts fewer than were admitted.
func TestQuotaLeasesNeverOver(t *testing.T) {
	const limit, workers, each = 3000, 8, 1000
	m := leasetwin.NewMemoryStore()
	static := algorithms.Request{Key: "static", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: limit, Window: algorithms.MaxWindow}, Cost: 1,
		Quota: algorithms.QuotaAsk{For: 20 * time.Millisecond}}
	var admitted, leased atomic.Int64
	var wg sync.WaitGroup
	for inst := range 2 {
		q := NewLeases(m, m, fmt.Sprint("instance", inst), nil)
		defer q.Close()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ip := static
				ip.Key = fmt.Sprintf("ip%d-%d", inst, w)
				ip.Limit.Events = 1_000_000
				for range each {
					ds, err := q.Allow(context.Background(), []algorithms.Request{ip, static})
					if err != nil {
						t.Error(err)
						return
					}
					if algorithms.Admitted([]algorithms.Request{ip, static}, ds) {
						admitted.Add(1)
						if ds[1].Leased {
							leased.Add(1)
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	if admitted.Load() > limit {
		t.Fatalf("admitted %d, over the limit of %d", admitted.Load(), limit)
	}
	ds, _ := m.Peek(context.Background(), []algorithms.Request{{Key: static.Key, Limit: static.Limit, Cost: 1}})
	if used := limit - ds[0].Remaining; used < admitted.Load() || used > limit {
		t.Errorf("the store counts %d: fewer than the %d admitted, or over the limit", used, admitted.Load())
	}
	t.Logf("admitted %d of %d (%d leased)", admitted.Load(), 2*workers*each, leased.Load())
}
