package sluice

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// recordingSettler is a memory store that records the size of each
// Settle call.
type recordingSettler struct {
	*algorithms.MemoryStore
	mu    sync.Mutex
	calls []int
	seen  chan struct{}
}

func (r *recordingSettler) Settle(ctx context.Context, ss []algorithms.Settlement) error {
	r.mu.Lock()
	r.calls = append(r.calls, len(ss))
	r.mu.Unlock()
	select {
	case r.seen <- struct{}{}:
	default:
	}
	return r.MemoryStore.Settle(ctx, ss)
}

// TestLeaseRenewalsBatch: the leases held on one store are renewed
// together, one Settle for all that are due, and the store's renewer ends
// once none is held.
func TestLeaseRenewalsBatch(t *testing.T) {
	store := &recordingSettler{MemoryStore: algorithms.NewMemoryStore(), seen: make(chan struct{}, 1)}
	limit := algorithms.Limit{Algorithm: algorithms.Concurrency, Events: 1, Window: 300 * time.Millisecond}
	var reqs []algorithms.Request
	for i := range 10 {
		reqs = append(reqs, algorithms.Request{Key: fmt.Sprint("batch:", i), Limit: limit, Cost: 1, Lease: fmt.Sprint("lease-", i), Settles: true})
	}
	ds := store.AllowAt(time.Now(), reqs)
	leaseRenewals.start(store, nil, reqs, ds)
	for range 3 {
		<-store.seen
	}
	leaseRenewals.stop(store, reqs)
	store.mu.Lock()
	for i, n := range store.calls {
		if n != len(reqs) {
			t.Errorf("renewal call %d: got %d leases, want all %d in one call", i, n, len(reqs))
		}
	}
	store.mu.Unlock()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		leaseRenewals.mu.Lock()
		_, running := leaseRenewals.byStore[store]
		leaseRenewals.mu.Unlock()
		if !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("renewer still running 10s after its last lease was given back")
		}
	}
}

// TestLeaseRenewalsBounded: many leases due at once are renewed in calls
// of at most maxRenewalsPerCall each, so one renewal never blocks Redis
// for long.
func TestLeaseRenewalsBounded(t *testing.T) {
	store := &recordingSettler{MemoryStore: algorithms.NewMemoryStore(), seen: make(chan struct{}, 1)}
	limit := algorithms.Limit{Algorithm: algorithms.Concurrency, Events: 1, Window: time.Minute}
	const leases = 2*maxRenewalsPerCall + 88
	due := make([]algorithms.Settlement, leases)
	for i := range due {
		due[i] = algorithms.Renewal(algorithms.Request{Key: fmt.Sprint("bounded:", i), Limit: limit, Cost: 1, Lease: fmt.Sprint("lease-", i)})
	}
	(&renewer{store: store}).renew(due)
	store.mu.Lock()
	defer store.mu.Unlock()
	total := 0
	for i, n := range store.calls {
		if n > maxRenewalsPerCall {
			t.Errorf("renewal call %d: got %d leases, want at most %d", i, n, maxRenewalsPerCall)
		}
		total += n
	}
	if got, want := total, leases; got != want {
		t.Errorf("leases renewed: got %d, want %d", got, want)
	}
}

// TestLeaseRenewalsDueOrder: a renewer keeps its leases by due time: a
// lease taken wakes it only when it falls due before every other (a later
// one needs no look), a renewal takes the leases due with those within
// half their interval of it, and a lease given back is never renewed.
func TestLeaseRenewalsDueOrder(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	rs := &renewals{byStore: make(map[algorithms.Store]*renewer)}
	rn := &renewer{leases: make(map[string]*heldLease), wake: make(chan struct{}, 1)}
	lease := func(id string, every time.Duration, due time.Duration) heldLease {
		r := algorithms.Request{Key: "order:" + id, Limit: algorithms.Limit{Algorithm: algorithms.Concurrency, Events: 1, Window: 3 * every}, Lease: id}
		return heldLease{renewal: algorithms.Renewal(r), every: every, due: t0.Add(due)}
	}
	holds := []struct {
		lease heldLease
		first bool
	}{
		{lease("a", 30*time.Second, 30*time.Second), true},
		{lease("b", 30*time.Second, 40*time.Second), false},
		{lease("c", 30*time.Second, 50*time.Second), false},
		{lease("d", 10*time.Second, 10*time.Second), true},
		{lease("e", 30*time.Second, 31*time.Second), false},
	}
	for _, h := range holds {
		if got, want := rn.hold(h.lease), h.first; got != want {
			t.Errorf("hold %s: got first %v, want %v", h.lease.renewal.Lease, got, want)
		}
	}
	rn.store = &nopSettler{}
	rs.byStore[rn.store] = rn
	rs.stop(rn.store, []algorithms.Request{{Lease: "e"}})
	steps := []struct {
		at      time.Duration
		renewed []string
		nextDue time.Duration
	}{
		{5 * time.Second, nil, 10 * time.Second},
		{12 * time.Second, []string{"d"}, 22 * time.Second},
		{31 * time.Second, []string{"d", "a", "b"}, 41 * time.Second}, // c is due 19s on, past half its interval
	}
	for _, s := range steps {
		due, next, ok := rs.due(rn, t0.Add(s.at), false)
		if !ok {
			t.Fatalf("at %v: renewer gone with leases held", s.at)
		}
		var got []string
		for _, r := range due {
			got = append(got, r.Lease)
		}
		if fmt.Sprint(got) != fmt.Sprint(s.renewed) {
			t.Errorf("at %v: renewed %v, want %v", s.at, got, s.renewed)
		}
		if got, want := next, t0.Add(s.nextDue); !got.Equal(want) {
			t.Errorf("at %v: next due %v, want %v", s.at, got.Sub(t0), want.Sub(t0))
		}
	}
}

// failingSettler fails every Settle and signals each call.
type failingSettler struct {
	algorithms.Store // the rest of the contract, which renewals never call
	calls            chan struct{}
}

func (f *failingSettler) Settle(context.Context, []algorithms.Settlement) error {
	select {
	case f.calls <- struct{}{}:
	default:
	}
	return errors.New("redis: connection refused")
}

// TestLeaseRenewalFailureLogged: a renewal that fails is logged, at most
// one line per logInterval per store, counting the leases it failed to
// renew, however many times it fails meanwhile.
func TestLeaseRenewalFailureLogged(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	store := &failingSettler{calls: make(chan struct{}, 1)}
	limit := algorithms.Limit{Algorithm: algorithms.Concurrency, Events: 3, Window: 30 * time.Millisecond}
	var reqs []algorithms.Request
	for i := range 3 {
		reqs = append(reqs, algorithms.Request{Key: "fail:k", Limit: limit, Cost: 1, Lease: fmt.Sprint("fail-", i), Settles: true})
	}
	leaseRenewals.start(store, zap.New(core), reqs, []algorithms.Decision{{Allowed: true}, {Allowed: true}, {Allowed: true}})
	for range 4 { // the first fails, then three more within logInterval
		<-store.calls
	}
	leaseRenewals.stop(store, reqs)
	lines := logs.FilterMessageSnippet("renewing concurrency leases failed").AllUntimed()
	if got, want := len(lines), 1; got != want {
		t.Fatalf("log lines: got %d, want %d (one per %v)", got, want, logInterval)
	}
	if got, want := lines[0].ContextMap()["leases"], int64(len(reqs)); got != want {
		t.Errorf("leases in the line: got %v, want %d", got, want)
	}
}

// TestLeaseRenewalsDueInCalls: a batch of leases due at once is taken a
// call's worth (maxRenewalsPerCall) at a time, each under the lock on its
// own, until every lease of the batch is renewed.
func TestLeaseRenewalsDueInCalls(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	rs := &renewals{byStore: make(map[algorithms.Store]*renewer)}
	rn := &renewer{store: &nopSettler{}, leases: make(map[string]*heldLease)}
	limit := algorithms.Limit{Algorithm: algorithms.Concurrency, Events: 1, Window: 30 * time.Second}
	const leases = 2*maxRenewalsPerCall + 88
	for i := range leases {
		r := algorithms.Request{Key: "calls:k", Limit: limit, Lease: fmt.Sprint("lease-", i)}
		rn.hold(heldLease{renewal: algorithms.Renewal(r), every: 10 * time.Second, due: t0.Add(time.Duration(i) * time.Millisecond)})
	}
	now := t0.Add(time.Second)
	for i, want := range []int{maxRenewalsPerCall, maxRenewalsPerCall, 88, 0} {
		due, _, ok := rs.due(rn, now, i > 0)
		if !ok {
			t.Fatalf("call %d: renewer gone with leases held", i)
		}
		if got := len(due); got != want {
			t.Errorf("call %d: got %d leases, want %d", i, got, want)
		}
	}
}
