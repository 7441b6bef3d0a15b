package sluice

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// Circuit breaker settings: after breakerThreshold consecutive failures,
// Redis is left alone for breakerCooldown (±20% jitter, so that a fleet of
// Caddys does not probe in step); then one request probes it.
const (
	breakerThreshold = 5
	breakerCooldown  = time.Second
)

// errCircuitOpen is the failure of a request decided without calling Redis
// while the breaker is open.
var errCircuitOpen = errors.New("circuit breaker open: redis failed repeatedly")

// breaker stops requests from paying the Redis timeout one after another
// while Redis is down. It is shared by every handler on one Redis client.
type breaker struct {
	mu        sync.Mutex
	failures  int       // consecutive
	openUntil time.Time // zero when closed
	probing   bool      // a probe is in flight
}

// allow reports whether a request may call Redis now: always while closed,
// never while open, and once (the probe) when the cool-down has passed.
func (b *breaker) allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.openUntil.IsZero():
		return true
	case now.Before(b.openUntil) || b.probing:
		return false
	}
	b.probing = true
	return true
}

// record counts the outcome of a call that allow let through, and reports
// whether it closed an open breaker.
func (b *breaker) record(now time.Time, err error) (recovered bool) {
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

// abandon ends a call that allow let through without a verdict on Redis.
func (b *breaker) abandon() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
}

// isOpen reports whether requests are kept from Redis.
func (b *breaker) isOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.openUntil.IsZero()
}

// breakerStore keeps calls from the next store while the breaker is open.
// It sits under the deny cache, so cached denials are answered even then,
// and are not taken for a sign of Redis's health.
type breakerStore struct {
	next    *algorithms.RedisStore
	breaker *breaker
}

func (s *breakerStore) Allow(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	if !s.breaker.allow(time.Now()) {
		return nil, errCircuitOpen
	}
	ds, err := s.next.Allow(ctx, reqs)
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		s.breaker.abandon() // the client went away: says nothing about Redis
		return ds, err
	}
	s.breaker.record(time.Now(), err)
	return ds, err
}

// Peek and Reset are operators' calls: they go to Redis whatever the
// breaker says.
func (s *breakerStore) Peek(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	return s.next.Peek(ctx, reqs)
}

func (s *breakerStore) Reset(ctx context.Context, key string) error {
	return s.next.Reset(ctx, key)
}
