package algorithms

import (
	"slices"
	"sort"
)

// logEntry is one time in a sliding_log: the units admitted (or settled)
// at it. A log holds one entry per time, so its length is bounded by the
// requests in a window, never by their cost.
type logEntry struct {
	at, n int64 // µs; units, ≥ 1
}

// slidingLog mirrors luascripts/sliding_log.lua. s.log is sorted by time,
// one entry per time; s.a is the units of all its entries, expired or not
// (expired ones are dropped by the next change).
//
// An admission appends to the live part of the log in place: entries past
// the stored slice's length are invisible to the state it came from, so a
// verdict that is not committed changes nothing. append reallocates only
// when the backing array is full, copying just the live entries into twice
// their room, so a request costs O(1) amortized, whatever its cost.
func slidingLog(s state, now, events, window, _, cost int64) verdict {
	live, used := liveLog(s, now-window)
	v := verdict{remaining: max(0, events-used), resetAfter: window, moreAfter: window}
	if len(live) > 0 {
		v.reset = max(0, live[len(live)-1].at+window-now)
		v.more = max(0, live[0].at+window-now)
		v.moreAfter = min(window, v.more)
	}
	switch {
	case used+cost <= events:
		v.allowed = true
		v.next = state{a: used + cost, log: addUnits(live, now, cost), expires: now + window}
	case cost > events:
		v.retry = window
	default:
		v.retry = logRetry(live, used+cost-events) + window - now
	}
	return v
}

// liveLog is the entries of s newer than since and their units.
func liveLog(s state, since int64) ([]logEntry, int64) {
	first := sort.Search(len(s.log), func(i int) bool { return s.log[i].at > since })
	used := s.a
	for _, e := range s.log[:first] {
		used -= e.n
	}
	return s.log[first:], used
}

// logRetry is the time of the live entry whose leaving frees the free-th
// unit; live holds at least free units.
func logRetry(live []logEntry, free int64) int64 {
	for _, e := range live {
		if free -= e.n; free <= 0 {
			return e.at
		}
	}
	return live[len(live)-1].at // not reached: used counts live
}

// addUnits is live with n units added at at (n < 0 takes them away; an
// entry left with none is dropped). Appending at the newest time or later
// reuses live's array when it has room; anything else works on a copy.
func addUnits(live []logEntry, at, n int64) []logEntry {
	last := len(live) - 1
	if n > 0 && (last < 0 || live[last].at < at) {
		if cap(live) == len(live) { // room for as many again
			live = append(make([]logEntry, 0, 2*len(live)+1), live...)
		}
		return append(live, logEntry{at, n})
	}
	next := slices.Clone(live)
	i := sort.Search(len(next), func(i int) bool { return next[i].at >= at })
	switch {
	case i < len(next) && next[i].at == at && next[i].n+n > 0:
		next[i].n += n
	case i < len(next) && next[i].at == at:
		next = slices.Delete(next, i, i+1)
	case n > 0:
		next = slices.Insert(next, i, logEntry{at, n})
	}
	return next
}

// slidingLogSettle mirrors algorithms.sliding_log.settle: a refund takes
// units from the entry at at, a debt adds units at at (up to the debt
// cap), while at still counts.
func slidingLogSettle(s state, now, at, events, window, _, delta int64, _ string) (state, bool) {
	if at <= now-window {
		return s, false
	}
	live, used := liveLog(s, now-window)
	var n int64
	if delta < 0 {
		i := sort.Search(len(live), func(i int) bool { return live[i].at >= at })
		if i < len(live) && live[i].at == at {
			n = -min(live[i].n, -delta)
		}
	} else {
		n = min(delta, max(0, debtCap(events)-used))
	}
	if n == 0 {
		return s, false
	}
	return state{a: used + n, log: addUnits(live, at, n), expires: max(s.expires, at+window)}, true
}
