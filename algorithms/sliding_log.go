package algorithms

import (
	"slices"
	"sort"
)

// slidingLog mirrors luascripts/sliding_log.lua. s.log is sorted ascending.
//
// An admission appends to the live part of the log in place: entries past
// the stored slice's length are invisible to the state it came from, so a
// verdict that is not committed changes nothing. append reallocates only
// when the backing array is full, copying just the live entries into twice
// their room, so a request costs O(cost) amortized, not O(events).
func slidingLog(s state, now, events, window, _, cost int64) verdict {
	since := now - window
	first := sort.Search(len(s.log), func(i int) bool { return s.log[i] > since })
	live := s.log[first:]
	used := int64(len(live))
	v := verdict{remaining: max(0, events-used), resetAfter: window, moreAfter: window}
	if used > 0 {
		v.reset = max(0, live[used-1]+window-now)
		v.more = max(0, live[0]+window-now)
		v.moreAfter = min(window, v.more)
	}
	switch {
	case used+cost <= events:
		v.allowed = true
		v.next = state{log: appendAt(live, now, cost), expires: now + window}
	case cost > events:
		v.retry = window
	default:
		v.retry = live[used+cost-events-1] + window - now
	}
	return v
}

// appendAt is live with cost entries of now added, sorted.
func appendAt(live []int64, now, cost int64) []int64 {
	if n := len(live); n > 0 && live[n-1] > now { // the clock went back: sort a copy
		next := append(slices.Clone(live), make([]int64, cost)...)
		for i := range cost {
			next[int64(n)+i] = now
		}
		slices.Sort(next)
		return next
	}
	if n := int64(len(live)); int64(cap(live))-n < cost { // room for as many again
		live = append(make([]int64, 0, 2*n+cost), live...)
	}
	for range cost {
		live = append(live, now)
	}
	return live
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
