package sluice

import (
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

// isOpen reports whether requests are kept from Redis.
func (b *breaker) isOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.openUntil.IsZero()
}
