package algorithms

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestBreaker(t *testing.T) {
	var b Breaker
	now := time.Unix(1000, 0)
	fail := errors.New("down")
	for i := range breakerThreshold {
		if !b.Allow(now) {
			t.Fatalf("call %d refused before the threshold", i)
		}
		b.Record(now, fail)
	}
	if b.Allow(now) || !b.IsOpen() {
		t.Fatal("breaker still lets calls through after the threshold")
	}
	later := now.Add(breakerCooldown * 2)
	if !b.Allow(later) {
		t.Fatal("no probe after the cool-down")
	}
	if b.Allow(later) {
		t.Fatal("a second probe while the first is in flight")
	}
	b.Record(later, fail)
	if b.Allow(later) {
		t.Fatal("a failed probe did not reopen the breaker")
	}
	evenLater := later.Add(breakerCooldown * 2)
	if !b.Allow(evenLater) {
		t.Fatal("no probe after the second cool-down")
	}
	if recovered := b.Record(evenLater, nil); !recovered {
		t.Error("a successful probe did not report recovery")
	}
	if !b.Allow(evenLater) || b.IsOpen() {
		t.Error("breaker not closed after a successful probe")
	}
}

// skewStore answers every request with ErrClockSkew, as Redis does to a
// caller whose period boundaries do not hold its clock.
type skewStore struct{ MemoryStore }

func (*skewStore) Allow(context.Context, []Request) ([]Decision, error) {
	return nil, fmt.Errorf("decide script: %w", ErrClockSkew)
}

// TestBreakerIgnoresClockSkew: a store that refuses callers' clocks
// answered: however many times, the breaker stays closed.
func TestBreakerIgnoresClockSkew(t *testing.T) {
	b := new(Breaker)
	store := &breakerStore{next: new(skewStore), breaker: b}
	for i := range 4 * breakerThreshold {
		if _, err := store.Allow(context.Background(), nil); !errors.Is(err, ErrClockSkew) {
			t.Fatalf("call %d: %v, want ErrClockSkew", i+1, err)
		}
	}
	if b.IsOpen() {
		t.Error("the breaker opened on clock skew")
	}
}

// failingStore fails every request, counting the calls it got.
type failingStore struct {
	MemoryStore
	calls int
}

func (s *failingStore) Allow(context.Context, []Request) ([]Decision, error) {
	s.calls++
	return nil, errors.New("down")
}

// TestBreakerStoreOpensOnFailures: a breakerStore dates the failures
// that open its breaker at the time they came (it reads the clock for a
// failure only), so the requests after them are kept from the store for
// the cool-down, not let through as if it had passed.
func TestBreakerStoreOpensOnFailures(t *testing.T) {
	b, next := new(Breaker), new(failingStore)
	store := &breakerStore{next: next, breaker: b}
	for range breakerThreshold {
		if _, err := store.Allow(context.Background(), nil); err == nil || errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("got %v before the threshold, want the store's failure", err)
		}
	}
	for range 3 {
		if _, err := store.Allow(context.Background(), nil); !errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("got %v after the threshold, want ErrCircuitOpen", err)
		}
	}
	if next.calls != breakerThreshold {
		t.Errorf("the store got %d calls, want %d", next.calls, breakerThreshold)
	}
	if !b.Allow(time.Now().Add(2 * breakerCooldown)) {
		t.Error("no probe after the cool-down")
	}
}
