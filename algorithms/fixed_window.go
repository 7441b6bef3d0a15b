package algorithms

// fixedWindow mirrors luascripts/fixed_window.lua. Everything comes back at
// the window's end, so more and reset are the time to it whenever
// something is used, and 0 for a key with nothing used (its quota is whole).
func fixedWindow(s state, now, events, window, _, cost int64) verdict {
	start, count := now-now%window, int64(0)
	if s.a >= start {
		start, count = s.a, s.b
	}
	reset := start + window - now
	v := verdict{remaining: events - count, resetAfter: reset, moreAfter: reset}
	if count > 0 {
		v.more, v.reset = reset, reset
	}
	if count+cost <= events {
		v.allowed = true
		v.next = state{a: start, b: count + cost, expires: now + reset}
	} else {
		v.retry = reset
	}
	return v
}

// fixedWindowSettle mirrors algorithms.fixed_window.settle: delta changes
// the count of the reservation's window while it is the stored one.
func fixedWindowSettle(s state, _, at, events, window, _, delta int64, _ string) (state, bool) {
	if s.expires == 0 || s.a != at-at%window {
		return s, false
	}
	s.b = clamp(s.b+delta, 0, debtCap(events))
	return s, true
}
