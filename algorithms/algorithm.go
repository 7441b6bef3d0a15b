package algorithms

import "time"

// Algorithm names a rate-limiting algorithm: one entry of the table (table.go).
type Algorithm string

// The algorithms. FixedWindow, SlidingLog and TokenBucket are exact: under any
// concurrency, admitted ≤ limit, and admitted == limit when demand exceeds it.
// SlidingWindow never admits more than the limit in any trailing window
// either, in small fixed memory: the window is cut into SlidingWindowSlots
// slots and the oldest counts whole until it has left the window, so it
// may refuse a request up to window/SlidingWindowSlots later than an exact
// log would (sliding_window.go). Concurrency is in concurrency.go.
const (
	FixedWindow   Algorithm = "fixed_window"
	SlidingWindow Algorithm = "sliding_window"
	SlidingLog    Algorithm = "sliding_log"
	TokenBucket   Algorithm = "token_bucket"
)

// Features are what an algorithm supports, beyond events per window.
type Features struct {
	// Period: it may count in calendar periods instead of a window.
	Period bool
	// Burst: a capacity apart from its events (burst, burst_placeholder,
	// an override's burst).
	Burst bool
	// MaxDelay: a request over the limit may wait for its turn.
	MaxDelay bool
	// Placeholders: its events may come from a placeholder per request.
	Placeholders bool
	// Overrides: an operator may set one key's limit.
	Overrides bool
	// Settles: what a request took may be corrected after its response
	// (count_status, cost_from_response).
	Settles bool
	// InFlight: it counts requests in flight, one slot each (whatever its
	// cost), given back after the response; a slot outlives a Caddy that
	// died for the window, which then defaults to DefaultWindow, and the
	// headers announce no window.
	InFlight bool
	// Leases: a hot key may take quota ahead, in leases.
	Leases bool
	// DefaultWindow is the window of a zone that sets none (0: required).
	DefaultWindow time.Duration
	// EventsCap bounds its events below MaxEvents (zero: no bound).
	EventsCap EventsCap
}

// EventsCap bounds an algorithm's events: at most Max, because it Why;
// Instead is what to use beyond it.
type EventsCap struct {
	Max          int64
	Why, Instead string
}

// has reports whether f has every feature set in want (its flags; its
// window and cap aside).
func (f Features) has(want Features) bool {
	return (f.Period || !want.Period) && (f.Burst || !want.Burst) && (f.MaxDelay || !want.MaxDelay) &&
		(f.Placeholders || !want.Placeholders) && (f.Overrides || !want.Overrides) &&
		(f.Settles || !want.Settles) && (f.InFlight || !want.InFlight) && (f.Leases || !want.Leases)
}

// Features are what a supports; none for an unknown name.
func (a Algorithm) Features() Features {
	if s, ok := specs[a]; ok {
		return s.Features
	}
	return Features{}
}
