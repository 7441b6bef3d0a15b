package sluice

import (
	"sync"
	"time"
)

// logInterval is the least time between two lines of one throttled log (a
// zone's dry-run denials, one cause of Redis failure): an outage or a
// shadow rollout logs a line per interval, not per request.
const logInterval = 10 * time.Second

// throttle lets one event through per interval and counts the events it
// held back, so that the line it lets through can say how many it stands
// for. The zero value lets the first event through. Time is a parameter.
type throttle struct {
	interval time.Duration

	mu      sync.Mutex
	last    time.Time
	pending int
}

// tickAt counts an event at now, and reports whether to log it, with the
// number of events (this one included) since the last one logged.
func (t *throttle) tickAt(now time.Time) (n int, ok bool) {
	return t.addAt(now, 1)
}

// addAt counts events events at now, as tickAt counts one.
func (t *throttle) addAt(now time.Time, events int) (n int, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending += events
	if !t.last.IsZero() && now.Sub(t.last) < t.interval {
		return 0, false
	}
	n, t.pending, t.last = t.pending, 0, now
	return n, true
}
