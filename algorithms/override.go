package algorithms

import (
	"fmt"
)

// Override is a key's own limit, set by an operator (the admin API) in a
// zone with overrides: it replaces the request's Events and Burst (a
// token bucket's capacity; 0 means Events) in the store, in the same
// atomic call as the decision. The zero Override is none.
// Both fit an int32 (MaxEvents is 10^9), which keeps a Decision small.
type Override struct {
	Events int32
	Burst  int32
}

// NewOverride is the override of events and burst (0: none), or an error
// when events is outside 1 to MaxEvents or burst outside 0 to MaxEvents.
func NewOverride(events, burst int64) (Override, error) {
	if events < 1 || events > MaxEvents {
		return Override{}, fmt.Errorf("events must be from 1 to %d, got %d", MaxEvents, events)
	}
	if burst < 0 || burst > MaxEvents {
		return Override{}, fmt.Errorf("burst must be from 1 to %d, or 0 for none (the events), got %d", MaxEvents, burst)
	}
	return Override{Events: int32(events), Burst: int32(burst)}, nil
}

// Set reports whether o is an override (not the zero value).
func (o Override) Set() bool { return o.Events > 0 }

// capacity is o's burst, or its events when it has none.
func (o Override) capacity() int32 {
	if o.Burst > 0 {
		return o.Burst
	}
	return o.Events
}

// Apply returns l with o's events and burst, or l when o is not set. For
// algorithms without a burst (Features), Burst stays 0.
func (o Override) Apply(l Limit) Limit {
	if !o.Set() {
		return l
	}
	l.Events = int64(o.Events)
	l.Burst = 0
	if l.Algorithm.Features().Burst {
		l.Burst = int64(o.capacity())
	}
	return l
}

// Validate reports whether o may be set on a zone of limit l: events and
// burst from 1 to 10^9, burst only on an algorithm with one, and the
// limit it makes one l's algorithm accepts (sliding_log at most 10,000;
// max_delay's bound).
func (o Override) Validate(l Limit) error {
	if _, err := NewOverride(int64(o.Events), int64(o.Burst)); err != nil {
		return err
	}
	if o.Burst != 0 && !l.Algorithm.Features().Burst {
		return fmt.Errorf("burst applies only to %s, not %s", NamesWith(Features{Burst: true}), l.Algorithm)
	}
	return o.Apply(l).Validate()
}

// HasOverrides reports whether any of reqs is of a zone with overrides:
// its limit may change at any moment on every instance, so a DenyCache
// answers it only while it is banned.
func HasOverrides(reqs []Request) bool {
	for i := range reqs {
		if reqs[i].Overrides {
			return true
		}
	}
	return false
}

// uncacheable reports whether a DenyCache must neither answer nor
// remember reqs but for a ban: settled after their response, or of a zone
// with overrides.
func uncacheable(reqs []Request) bool { return Settles(reqs) || HasOverrides(reqs) }

// ApplyOverrides sets, in each request of reqs whose decision reports an
// override, the limit in force: headers, settlements and capacity checks
// then use it.
func ApplyOverrides(reqs []Request, ds []Decision) {
	for i := range ds {
		if ds[i].Override.Set() {
			reqs[i].Limit = ds[i].Override.Apply(reqs[i].Limit)
		}
	}
}
