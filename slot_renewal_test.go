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

// TestSlotRenewalsBatch: the slots held on one store are renewed
// together, one Settle for all that are due, and the store's renewer ends
// once none is held.
func TestSlotRenewalsBatch(t *testing.T) {
	store := &recordingSettler{MemoryStore: algorithms.NewMemoryStore(), seen: make(chan struct{}, 1)}
	limit := algorithms.Limit{Algorithm: algorithms.Concurrency, Events: 1, Window: 300 * time.Millisecond}
	var reqs []algorithms.Request
	for i := range 10 {
		reqs = append(reqs, algorithms.Request{Key: fmt.Sprint("batch:", i), Limit: limit, Cost: 1, Slot: fmt.Sprint("slot-", i), Settles: true})
	}
	ds := store.AllowAt(time.Now(), reqs)
	slotRenewals.start(store, nil, reqs, ds)
	for range 3 {
		<-store.seen
	}
	slotRenewals.stop(store, reqs)
	store.mu.Lock()
	for i, n := range store.calls {
		if n != len(reqs) {
			t.Errorf("renewal call %d: got %d slots, want all %d in one call", i, n, len(reqs))
		}
	}
	store.mu.Unlock()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		slotRenewals.mu.Lock()
		_, running := slotRenewals.byStore[store]
		slotRenewals.mu.Unlock()
		if !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("renewer still running 10s after its last slot was given back")
		}
	}
}

// TestSlotRenewalsBounded: many slots due at once are renewed in calls
// of at most maxRenewalsPerCall each, so one renewal never blocks Redis
// for long.
func TestSlotRenewalsBounded(t *testing.T) {
	store := &recordingSettler{MemoryStore: algorithms.NewMemoryStore(), seen: make(chan struct{}, 1)}
	limit := algorithms.Limit{Algorithm: algorithms.Concurrency, Events: 1, Window: time.Minute}
	const slots = 2*maxRenewalsPerCall + 88
	due := make([]algorithms.Settlement, slots)
	for i := range due {
		due[i] = algorithms.Renewal(algorithms.Request{Key: fmt.Sprint("bounded:", i), Limit: limit, Cost: 1, Slot: fmt.Sprint("slot-", i)})
	}
	(&renewer{store: store}).renew(due)
	store.mu.Lock()
	defer store.mu.Unlock()
	total := 0
	for i, n := range store.calls {
		if n > maxRenewalsPerCall {
			t.Errorf("renewal call %d: got %d slots, want at most %d", i, n, maxRenewalsPerCall)
		}
		total += n
	}
	if got, want := total, slots; got != want {
		t.Errorf("slots renewed: got %d, want %d", got, want)
	}
}

// TestSlotRenewalsDueOrder: a renewer keeps its slots by due time: a
// slot taken wakes it only when it falls due before every other (a later
// one needs no look), a renewal takes the slots due with those within
// half their interval of it, and a slot given back is never renewed.
func TestSlotRenewalsDueOrder(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	rs := &renewals{byStore: make(map[algorithms.Store]*renewer)}
	rn := &renewer{slots: make(map[string]*renewedSlot), wake: make(chan struct{}, 1)}
	slot := func(id string, every time.Duration, due time.Duration) renewedSlot {
		r := algorithms.Request{Key: "order:" + id, Limit: algorithms.Limit{Algorithm: algorithms.Concurrency, Events: 1, Window: 3 * every}, Slot: id}
		return renewedSlot{renewal: algorithms.Renewal(r), every: every, due: t0.Add(due)}
	}
	holds := []struct {
		slot  renewedSlot
		first bool
	}{
		{slot("a", 30*time.Second, 30*time.Second), true},
		{slot("b", 30*time.Second, 40*time.Second), false},
		{slot("c", 30*time.Second, 50*time.Second), false},
		{slot("d", 10*time.Second, 10*time.Second), true},
		{slot("e", 30*time.Second, 31*time.Second), false},
	}
	for _, h := range holds {
		if got, want := rn.hold(h.slot), h.first; got != want {
			t.Errorf("hold %s: got first %v, want %v", h.slot.renewal.Slot, got, want)
		}
	}
	rn.store = &nopSettler{}
	rs.byStore[rn.store] = rn
	rs.stop(rn.store, []algorithms.Request{{Slot: "e"}})
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
			t.Fatalf("at %v: renewer gone with slots held", s.at)
		}
		var got []string
		for _, r := range due {
			got = append(got, r.Slot)
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

// TestSlotRenewalFailureLogged: a renewal that fails is logged, at most
// one line per logInterval per store, counting the slots it failed to
// renew, however many times it fails meanwhile.
func TestSlotRenewalFailureLogged(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	store := &failingSettler{calls: make(chan struct{}, 1)}
	limit := algorithms.Limit{Algorithm: algorithms.Concurrency, Events: 3, Window: 30 * time.Millisecond}
	var reqs []algorithms.Request
	for i := range 3 {
		reqs = append(reqs, algorithms.Request{Key: "fail:k", Limit: limit, Cost: 1, Slot: fmt.Sprint("fail-", i), Settles: true})
	}
	slotRenewals.start(store, zap.New(core), reqs, []algorithms.Decision{{Allowed: true}, {Allowed: true}, {Allowed: true}})
	for range 4 { // the first fails, then three more within logInterval
		<-store.calls
	}
	slotRenewals.stop(store, reqs)
	// the line's message and field say "leases", as operators know them: the slots
	lines := logs.FilterMessageSnippet("renewing concurrency leases failed").AllUntimed()
	if got, want := len(lines), 1; got != want {
		t.Fatalf("log lines: got %d, want %d (one per %v)", got, want, logInterval)
	}
	if got, want := lines[0].ContextMap()["leases"], int64(len(reqs)); got != want {
		t.Errorf("slots in the line: got %v, want %d", got, want)
	}
}

// TestSlotRenewalsDueInCalls: a batch of slots due at once is taken a
// call's worth (maxRenewalsPerCall) at a time, each under the lock on its
// own, until every slot of the batch is renewed.
func TestSlotRenewalsDueInCalls(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	rs := &renewals{byStore: make(map[algorithms.Store]*renewer)}
	rn := &renewer{store: &nopSettler{}, slots: make(map[string]*renewedSlot)}
	limit := algorithms.Limit{Algorithm: algorithms.Concurrency, Events: 1, Window: 30 * time.Second}
	const slots = 2*maxRenewalsPerCall + 88
	for i := range slots {
		r := algorithms.Request{Key: "calls:k", Limit: limit, Slot: fmt.Sprint("slot-", i)}
		rn.hold(renewedSlot{renewal: algorithms.Renewal(r), every: 10 * time.Second, due: t0.Add(time.Duration(i) * time.Millisecond)})
	}
	now := t0.Add(time.Second)
	for i, want := range []int{maxRenewalsPerCall, maxRenewalsPerCall, 88, 0} {
		due, _, ok := rs.due(rn, now, i > 0)
		if !ok {
			t.Fatalf("call %d: renewer gone with slots held", i)
		}
		if got := len(due); got != want {
			t.Errorf("call %d: got %d slots, want %d", i, got, want)
		}
	}
}
