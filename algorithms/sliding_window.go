package algorithms

// slidingWindow mirrors luascripts/sliding_window.lua:
// used = cur + floor(prev × (window - elapsed) / window), computed exactly
// (prev × window reaches 10^9 × 366 days in µs, past 2^64).
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
	weighted, _ := mulDiv(prev, window-elapsed, window)
	used := cur + weighted
	v := verdict{remaining: max(0, events-used), resetAfter: start + 2*window - now}
	switch {
	case cur > 0:
		v.reset = v.resetAfter
	case prev > 0:
		v.reset = start + window - now
	}
	v.more = slidingMore(start, now, window, cur, prev, weighted)
	v.moreAfter = slidingMore(start, now, window, cur+cost, prev, weighted)
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

// slidingMore is how long until used drops by a unit: when the previous
// window's weighted count does, or else 1 µs into the next window, when
// the current count starts to weigh less; 0 when nothing is used.
func slidingMore(start, now, window, cur, prev, weighted int64) int64 {
	switch {
	case weighted > 0:
		return start + weightBelow(window, prev, weighted-1) - now
	case cur > 0:
		return start + window + 1 - now
	default:
		return 0
	}
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
	return weightBelow(window, prev, room), true
}

// weightBelow is the first time e into a window at which the previous
// window's prev weigh at most k < prev:
// floor(prev×(window-e)/window) ≤ k  ⇔  e ≥ window - ceil((k+1)×window/prev) + 1.
func weightBelow(window, prev, k int64) int64 {
	return window - ceilMulDiv(k+1, window, prev) + 1
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
