package algorithms

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"
)

// Circuit breaker settings: after breakerThreshold consecutive failures,
// Redis is left alone for breakerCooldown (±20% jitter, so that a fleet of
// Caddys does not probe in step); then one request probes it.
const (
	breakerThreshold = 5
	breakerCooldown  = time.Second
	// MaxBreakerCooldown is the longest Redis is left alone, jitter
	// included: a request refused meanwhile may pass once it is over.
	MaxBreakerCooldown = breakerCooldown * 6 / 5
)

// ErrCircuitOpen is the failure of a request decided without calling the
// store while the breaker is open.
var ErrCircuitOpen = errors.New("circuit breaker open: redis failed repeatedly")

// Breaker stops requests from paying the store's timeout one after another
// while the store is down. Its methods take the time as a parameter.
type Breaker struct {
	mu        sync.Mutex
	failures  int       // consecutive
	openUntil time.Time // zero when closed
	probing   bool      // a probe is in flight
}

// Allow reports whether a request may call the store at now: always while closed,
// never while open, and once (the probe) when the cool-down has passed.
func (b *Breaker) Allow(now time.Time) bool {
	return b.allowAt(func() time.Time { return now })
}

// allowAt is Allow at the time clock reads, read only while the breaker
// is open: a closed one lets a request through whatever the time, so a
// decision on a healthy store does not pay for reading the clock.
func (b *Breaker) allowAt(clock func() time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.openUntil.IsZero():
		return true
	case clock().Before(b.openUntil) || b.probing:
		return false
	}
	b.probing = true
	return true
}

// Record counts the outcome at now of a call that Allow let through, and reports
// whether it closed an open breaker.
func (b *Breaker) Record(now time.Time, err error) (recovered bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
	if err == nil {
		recovered = !b.openUntil.IsZero()
		b.failures, b.openUntil = 0, time.Time{}
		return recovered
	}
	b.failures++
	if b.failures >= breakerThreshold {
		jitter := time.Duration((rand.Float64()*0.4 - 0.2) * float64(breakerCooldown))
		b.openUntil = now.Add(breakerCooldown + jitter)
	}
	return false
}

// Abandon ends a call that Allow let through without a verdict on the
// store.
func (b *Breaker) Abandon() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
}

// IsOpen reports whether requests are kept from the store.
func (b *Breaker) IsOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.openUntil.IsZero()
}

// Guard builds the chain that decides on a remote store: the deny cache,
// over a circuit breaker, over next. The breaker is returned for its state
// (health, metrics); it is the chain's own.
func Guard(next Store) (*DenyCache, *Breaker) {
	b := new(Breaker)
	return NewDenyCache(&breakerStore{next: next, breaker: b}), b
}

// breakerStore keeps calls from the next store while the breaker is open.
// It sits under the deny cache, so cached denials are answered even then,
// and are not taken for a sign of the store's health.
type breakerStore struct {
	next    Store
	breaker *Breaker
}

// Allow reads the clock only for what the breaker needs it for: while it
// is open (Breaker.allowAt), and after a failure, when the failures may
// open it (Record reads no time of a success).
func (s *breakerStore) Allow(ctx context.Context, reqs []Request) ([]Decision, error) {
	if !s.breaker.allowAt(time.Now) {
		return nil, ErrCircuitOpen
	}
	ds, err := s.next.Allow(ctx, reqs)
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		s.breaker.Abandon() // the client went away: says nothing about the store
		return ds, err
	}
	var now time.Time
	failure := storeFailure(err)
	if failure != nil {
		now = time.Now()
	}
	s.breaker.Record(now, failure)
	return ds, err
}

// storeFailure is err as the breaker counts it: nil when the store
// answered, if only to refuse the caller's clock (ErrClockSkew). One
// instance's skewed clock fails its own period decisions and must not
// open the breaker that every zone on the store shares.
func storeFailure(err error) error {
	if err != nil && IsClockSkew(err) {
		return nil
	}
	return err
}

// Peek and Reset are operators' calls: they go to the store whatever the
// breaker says.
func (s *breakerStore) Peek(ctx context.Context, reqs []Request) ([]Decision, error) {
	return s.next.Peek(ctx, reqs)
}

func (s *breakerStore) Reset(ctx context.Context, key string) error {
	return s.next.Reset(ctx, key)
}

// Settle passes settlements to the next store whatever the breaker says: a
// settlement is small, runs after the response, and a lost one costs quota.
func (s *breakerStore) Settle(ctx context.Context, ss []Settlement) error {
	return s.next.Settle(ctx, ss)
}

// SetOverride and ClearOverride are operators' calls too, which report
// their own failures: they go to the store whatever the breaker says.
func (s *breakerStore) SetOverride(ctx context.Context, key string, o Override, ttl time.Duration) error {
	return s.next.SetOverride(ctx, key, o, ttl)
}

func (s *breakerStore) ClearOverride(ctx context.Context, key string) error {
	return s.next.ClearOverride(ctx, key)
}

// Interface guards
var _ Store = (*breakerStore)(nil)
