package algorithms

// Which limits a zone may set: Limit.Validate, by its algorithm's table
// entry (table.go).

import (
	"fmt"
	"time"
)

// Validate reports whether the limit can be enforced exactly: its
// algorithm is in the table, and it sets only what the algorithm supports
// (Features).
func (l Limit) Validate() error {
	spec, ok := specs[l.Algorithm]
	if !ok {
		return fmt.Errorf("unknown algorithm %q (want %s)", l.Algorithm, NamesWith(Features{}))
	}
	if l.Events < 1 || l.Events > MaxEvents {
		return fmt.Errorf("events must be from 1 to %d, got %d", MaxEvents, l.Events)
	}
	if c := spec.EventsCap; c.Max > 0 && l.Events > c.Max {
		return fmt.Errorf("events: %s %s, so at most %d, got %d; %s", l.Algorithm, c.Why, c.Max, l.Events, c.Instead)
	}
	if l.HasPeriod() {
		if err := l.validatePeriod(spec.Period); err != nil {
			return err
		}
	} else if l.Window < MinWindow || l.Window > MaxWindow {
		return fmt.Errorf("window must be between %v and %v, got %v", MinWindow, MaxWindow, l.Window)
	}
	if l.Burst < 0 || l.Burst > MaxEvents || (l.Burst > 0 && !spec.Burst) {
		return fmt.Errorf("burst must be from 1 to %d, or 0 for none (the events), and applies only to %s, got %d",
			MaxEvents, NamesWith(Features{Burst: true}), l.Burst)
	}
	return l.validateMaxDelay(spec.MaxDelay)
}

// validatePeriod checks a calendar zone: an algorithm with periods
// (supported), without a window.
func (l Limit) validatePeriod(supported bool) error {
	if l.Calendar.Period > PeriodYear {
		return fmt.Errorf("period: invalid value %d", l.Calendar.Period)
	}
	if !supported {
		return fmt.Errorf("period: a calendar period counts as %s, not %s", NamesWith(Features{Period: true}), l.Algorithm)
	}
	if l.Window != 0 {
		return fmt.Errorf("period and window exclude each other: a period's length is the calendar's")
	}
	return nil
}

// validateMaxDelay bounds max_delay so that a reservation takes the level
// past capacity by at most MaxEvents events (max_delay × events / window),
// which keeps every sum exact. supported: l's algorithm has max_delay.
func (l Limit) validateMaxDelay(supported bool) error {
	switch {
	case l.MaxDelay == 0:
		return nil
	case !supported:
		return fmt.Errorf("max_delay applies only to %s, not %s", NamesWith(Features{MaxDelay: true}), l.Algorithm)
	case l.MaxDelay < time.Microsecond || l.MaxDelay > MaxWindow:
		return fmt.Errorf("max_delay must be between 1µs and %v, got %v", MaxWindow, l.MaxDelay)
	}
	if over, _ := mulDiv(l.MaxDelay.Microseconds(), l.Events, l.Window.Microseconds()); over > MaxEvents {
		return fmt.Errorf("max_delay %v lets %d events wait at %d per %v; at most %d may", l.MaxDelay, over, l.Events, l.Window, int64(MaxEvents))
	}
	return nil
}
