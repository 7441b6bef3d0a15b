package algorithms

import (
	"slices"
	"sort"
)

// slidingLog mirrors luascripts/sliding_log.lua. s.log is sorted ascending.
func slidingLog(s state, now, events, window, _, cost int64) verdict {
	since := now - window
	first := sort.Search(len(s.log), func(i int) bool { return s.log[i] > since })
	live := s.log[first:]
	used := int64(len(live))
	v := verdict{remaining: max(0, events-used), resetAfter: window}
	if used > 0 {
		v.reset = max(0, live[used-1]+window-now)
	}
	switch {
	case used+cost <= events:
		v.allowed = true
		next := append(make([]int64, 0, used+cost), live...)
		for range cost {
			next = append(next, now)
		}
		if used > 0 && live[used-1] > now { // the clock went back
			slices.Sort(next)
		}
		v.next = state{log: next, expires: now + window}
	case cost > events:
		v.retry = window
	default:
		v.retry = live[used+cost-events-1] + window - now
	}
	return v
}

// slidingLogSettle mirrors algorithms.sliding_log.settle: a refund removes
// entries stamped at, a debt adds entries at at (up to the debt cap), while
// at still counts.
func slidingLogSettle(s state, now, at, events, window, _, delta int64, _ string) (state, bool) {
	since := now - window
	if at <= since {
		return s, false
	}
	live := s.log[sort.Search(len(s.log), func(i int) bool { return s.log[i] > since }):]
	lo := sort.Search(len(live), func(i int) bool { return live[i] >= at })
	hi := sort.Search(len(live), func(i int) bool { return live[i] > at })
	var n int64
	if delta < 0 {
		n = -min(int64(hi-lo), -delta)
	} else {
		n = min(delta, max(0, debtCap(events)-int64(len(live))))
	}
	if n == 0 {
		return s, false
	}
	next := make([]int64, 0, int64(len(live))+max(0, n))
	next = append(next, live[:hi+int(min(0, n))]...)
	for range max(0, n) {
		next = append(next, at)
	}
	next = append(next, live[hi:]...)
	return state{log: next, expires: max(s.expires, at+window)}, true
}
