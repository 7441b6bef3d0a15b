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
