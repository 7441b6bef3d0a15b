package algorithms

import (
	"slices"
	"sort"
	"time"
)

// slidingLog mirrors luascripts/sliding_log.lua. s.log is sorted by time,
// one entry per time; s.a is the units of all its entries, expired or not
// (expired ones are dropped by the next change).
//
// An admission appends to the live part of the log in place: entries past
// the stored slice's length are invisible to the state it came from, so a
// verdict that is not committed changes nothing. append reallocates only
// when the backing array is full, copying just the live entries into twice
// their room, so a request costs O(1) amortized, whatever its cost.
func slidingLog(s state, in input) verdict {
	now, events, window, cost := in.now, in.events, in.window, in.cost
	live, used := liveLog(s, now-window)
	v := verdict{remaining: max(0, events-used), resetAfter: window, moreAfter: window}
	if len(live) > 0 {
		v.reset = max(0, live[len(live)-1].at+window-now)
		v.more = max(0, live[0].at+window-now)
		v.moreAfter = min(window, v.more)
		// whole again once the newest entry leaves: a quota lease's,
		// stamped with its end, may be newer than this request
		v.resetAfter = max(window, v.reset)
	}
	switch {
	case used+cost <= events:
		v.allowed = true
		log, newest := addUnits(live, now, cost), now
		if len(log) > 0 { // a quota lease's entry, stamped with its end, may be the newest
			newest = max(now, log[len(log)-1].at)
		}
		v.next = state{a: used + cost, log: log, expires: newest + window}
	case cost > events:
		v.retry = window
	default:
		v.retry = logRetry(live, used, used+cost-events) + window - now
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

// SlidingLogWalk is how many entries a sliding_log refusal reads, at
// most, to find its exact Retry-After. The exact answer is the time of the
// entry whose leaving frees enough units, found by summing units entry by
// entry; a log of events one-unit entries puts it up to events/2 entries
// from either end, and a batch of such refusals would hold Redis past
// every other decision's timeout. A refusal buys no quota, so it must not
// buy that work either (docs/algorithms.md: cost buys quota, not work). Why 64:
// a batch holds up to 64 requests (redisstore's maxBatchRequests), so a
// batch of refusals reads at most 4,096 entries, fewer than one unbounded
// walk did, in three range reads per refusal (16, 32, 16); and every key
// with up to 64 requests in its window, or whose answer lies within 64
// entries of the end walked, still gets the exact answer. Beyond it the
// answer is when every live entry has left (newest + window − now): never
// earlier than a retry can pass, and at most the window.
// luascripts/sliding_log.lua's sl_walk is its twin.
const SlidingLogWalk = 64

// logRetry is the time of the live entry whose leaving frees the free-th
// unit of live's used units (live holds at least free), walking at most
// SlidingLogWalk entries from whichever end has fewer units to cross; when
// that entry lies further, the newest entry's time, when all have left.
// It gives the same answers as sl_retry.
func logRetry(live []logEntry, used, free int64) int64 {
	newest := live[len(live)-1].at
	keep := used - free // the units that may stay
	var seen int64
	for i := range min(len(live), SlidingLogWalk) {
		if keep < free { // newest first: the entry that passes keep
			e := live[len(live)-1-i]
			if seen += e.n; seen > keep {
				return e.at
			}
		} else { // oldest first: the entry that reaches free
			e := live[i]
			if seen += e.n; seen >= free {
				return e.at
			}
		}
	}
	return newest
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
func slidingLogSettle(s state, in settleInput) (state, bool) {
	now, at, events, window, delta := in.now, in.at, in.events, in.window, in.delta
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

// SlidingLogLeaseParts: a sliding_log lease lasts no more than a
// fiftieth of the window (luascripts/sliding_log.lua's sl_lease is the
// twin). Its units stay in the log up to one lease longer than requests'
// entries would, so this bounds what a leased unit costs in refusals at
// 2% of a window; a twentieth (a slot) cost 1.0–1.5 points of refusals
// near the limit in the 2 s replay (docs/performance.md). A window of a
// minute still leases the default 250 ms.
const SlidingLogLeaseParts = 50

// slidingLogLeaseLen is the longest sliding_log lease of a window, µs.
func slidingLogLeaseLen(window int64) int64 {
	return (window + SlidingLogLeaseParts - 1) / SlidingLogLeaseParts
}

// slidingLogLease mirrors algorithms.sliding_log's lease_end, grant and
// lease_at_end: a lease lasts no more than slidingLogLeaseLen, since its
// units count longer than their use; they are an entry stamped with its
// end, kept until that entry leaves the window (the reset), and a
// give-back settles at that end.
var slidingLogLease = leaseTwin{
	end: func(_ state, in input, last, _ int64) int64 { return min(last, in.now+slidingLogLeaseLen(in.window)) },
	longest: func(l Limit) time.Duration {
		return time.Duration(slidingLogLeaseLen(l.Window.Microseconds())) * time.Microsecond
	},
	grant: func(next state, in input, p *quotaPlan) state {
		next.a += p.units
		next.log = addUnits(next.log, p.end, p.units)
		next.expires = max(next.expires, p.end+in.window)
		p.reset = p.end + in.window - in.now
		return next
	},
	atEnd: true,
}
