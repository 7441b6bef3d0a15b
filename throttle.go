package sluice

import (
	"sync"
	"sync/atomic"
	"time"
)

// logInterval is the least time between two lines of one throttled log (a
// zone's dry-run denials, one cause of Redis failure): an outage or a
// shadow rollout logs a line per interval, not per request.
const logInterval = 10 * time.Second

// throttle lets one event through per interval and counts the events it
// held back, so that the line it lets through can say how many it stands
// for. The zero value lets the first event through. Time is a parameter.
//
// An event held back takes no lock (a flood of one zone's rejections
// counts on every core): it reads when the next line is due and adds
// itself to the pending count; only an event at or past that time takes
// the lock, to let one line through. Times are kept as offsets from the
// first line's time, so that they compare on the monotonic clock.
type throttle struct {
	interval time.Duration

	epoch   atomic.Pointer[time.Time] // the first line's time; nil before it
	next    atomic.Int64              // when the next line is due, in ns after epoch
	pending atomic.Int64              // events held back since the last line

	mu sync.Mutex // lets one line through at a time
}

// tickAt counts an event at now, and reports whether to log it, with the
// number of events (this one included) since the last one logged.
func (t *throttle) tickAt(now time.Time) (n int, ok bool) {
	return t.addAt(now, 1)
}

// addAt counts events events at now, as tickAt counts one.
func (t *throttle) addAt(now time.Time, events int) (n int, ok bool) {
	if t.heldAt(now) {
		t.pending.Add(int64(events))
		return 0, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.heldAt(now) { // another event let its line through first
		t.pending.Add(int64(events))
		return 0, false
	}
	epoch := t.epoch.Load()
	if epoch == nil {
		first := now // a copy, so that now stays on the caller's stack
		epoch = &first
		t.epoch.Store(epoch)
	}
	t.next.Store(int64(now.Sub(*epoch) + t.interval))
	return int(t.pending.Swap(0)) + events, true
}

// heldAt reports whether an event at now comes before the next line is due.
func (t *throttle) heldAt(now time.Time) bool {
	epoch := t.epoch.Load()
	return epoch != nil && int64(now.Sub(*epoch)) < t.next.Load()
}

// reset makes t as new: its next event is let through.
func (t *throttle) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.epoch.Store(nil)
	t.next.Store(0)
	t.pending.Store(0)
}
