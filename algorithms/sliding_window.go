package algorithms

// slidingWindow mirrors luascripts/sliding_window.lua.
func slidingWindow(s state, now, events, window, _, cost int64) verdict {
	start, cur, prev := now-now%window, int64(0), int64(0)
	switch {
	case s.expires == 0:
	case s.a >= start:
		start, cur, prev = s.a, s.b, s.c
	case s.a == start-window:
		prev = s.b
	}
	elapsed := max(0, now-start)
	used := cur + prev*(window-elapsed)/window
	v := verdict{remaining: max(0, events-used), resetAfter: start + 2*window - now}
	switch {
	case cur > 0:
		v.reset = v.resetAfter
	case prev > 0:
		v.reset = start + window - now
	}
	switch {
	case used+cost <= events:
		v.allowed = true
		v.next = state{a: start, b: cur + cost, c: prev, expires: now + v.resetAfter}
	case cost > events:
		v.retry = window
	default:
		if e, ok := fitsFrom(events, window, cur, prev, cost); ok {
			v.retry = start + e - now
		} else {
			e, _ := fitsFrom(events, window, 0, cur, cost)
			v.retry = start + window + e - now
		}
	}
	return v
}

// fitsFrom is how far into a window cost more fit, given cur counted in it
// and prev in the one before; false if they never fit in it.
func fitsFrom(events, window, cur, prev, cost int64) (int64, bool) {
	room := events - cur - cost
	if room < 0 {
		return 0, false
	}
	if prev <= room {
		return 0, true
	}
	return window - ceilDiv((room+1)*window, prev) + 1, true
}

// slidingWindowSettle mirrors algorithms.sliding_window.settle: delta
// changes the count of the reservation's window, current or previous.
func slidingWindowSettle(s state, _, at, events, window, _, delta int64, _ string) (state, bool) {
	start := at - at%window
	switch {
	case s.expires == 0:
		return s, false
	case s.a == start:
		s.b = clamp(s.b+delta, 0, debtCap(events))
	case s.a == start+window:
		s.c = clamp(s.c+delta, 0, debtCap(events))
	default:
		return s, false
	}
	return s, true
}
