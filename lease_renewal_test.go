package sluice

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

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
	leaseRenewals.start(store, reqs, ds)
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
