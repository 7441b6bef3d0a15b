package algorithms

import (
	"slices"
	"time"
)

// SlidingWindowSlots is how many slots sliding_window cuts a window into.
// The oldest slot counts whole until it has left the window, so the
// algorithm never admits more than events in any trailing window, and its
// only error is a refusal at most window/SlidingWindowSlots (rounded up to
// a µs) later than an exact log's. 20 keeps that under 5% of the window,
// cuts every window of whole milliseconds into whole microseconds (1 ms
// into 50 µs), and bounds a key's state to 21 slots (docs/performance.md
// measures its bytes).
// luascripts/sliding_window.lua's sw_slots is its twin.
const SlidingWindowSlots = 20

// slotLen is the length of window's slots in µs: window/SlidingWindowSlots
// rounded up, so a trailing window overlaps at most SlidingWindowSlots+1.
func slotLen(window int64) int64 {
	return (window + SlidingWindowSlots - 1) / SlidingWindowSlots
}

// slotLease is the longest lease of a zone whose leases last at most a
// slot.
func slotLease(l Limit) time.Duration {
	return time.Duration(slotLen(l.Window.Microseconds())) * time.Microsecond
}

// slidingWindow mirrors luascripts/sliding_window.lua: a slotted window.
// Slots are aligned to the epoch; each slot used is kept as its end (µs)
// and the count taken in it, and a slot counts until its end + window, when
// every event in it has left the trailing window. The state is the newest
// slot in a (its end) and b (its count: > 0 but after a request of cost 0,
// a grant-only call, as in the script), the running total of every stored
// slot in c, and the older slots in log as entries (at: the slot's end,
// n: its count > 0), oldest first.
//
// Slots that left are dropped from the front by reslicing, and a new slot
// is appended past the stored slice's length (as slidingLog does), so a
// verdict that is not committed changes nothing and a decision is O(1)
// amortized; a refusal walks the slots it needs to find when they leave.
func slidingWindow(s state, in input) verdict {
	now, events, window, cost := in.now, in.events, in.window, in.cost
	l := slotLen(window)
	end, count, total, older := s.a, s.b, s.c, s.log
	if s.expires == 0 || end+window <= now { // nothing left in the window
		end, count, total, older = 0, 0, 0, nil
	}
	for len(older) > 0 && older[0].at+window <= now {
		total, older = total-older[0].n, older[1:]
	}
	add := (floorDiv(now, l) + 1) * l // the end of now's slot
	if end > add {                    // the clock went back: count in the newest
		add = end
	}
	v := verdict{remaining: max(0, events-total), resetAfter: add + window - now}
	v.moreAfter = v.resetAfter
	if end > 0 { // a slot stored, if empty (a request of cost 0)
		oldest := end
		if len(older) > 0 {
			oldest = older[0].at
		}
		v.reset, v.more, v.moreAfter = end+window-now, oldest+window-now, oldest+window-now
	}
	switch {
	case total+cost <= events:
		v.allowed = true
		next := state{a: add, b: cost, c: total + cost, log: older, expires: add + window}
		if count > 0 && add == end {
			next.b = count + cost
		} else if count > 0 {
			next.log = appendSlot(older, end, count)
		}
		v.next = next
	case cost > events:
		v.retry = window
	default:
		v.retry = slotsLeave(older, end, total+cost-events) + window - now
	}
	return v
}

// slotsLeave is the end of the slot at which need units have been freed,
// walking older's slots, then the newest (end); its caller guarantees they
// hold need.
func slotsLeave(older []logEntry, end, need int64) int64 {
	for _, slot := range older {
		if need -= slot.n; need <= 0 {
			return slot.at
		}
	}
	return end
}

// appendSlot is older with (end, count) appended: in place past its
// length when there is room, else into a new array with room for as many
// slots again as a window holds (so copies are O(1) amortized per slot).
func appendSlot(older []logEntry, end, count int64) []logEntry {
	if cap(older) == len(older) {
		older = append(make([]logEntry, 0, len(older)+SlidingWindowSlots+1), older...)
	}
	return append(older, logEntry{end, count})
}

// floorDiv is floor(a/b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// slidingWindowSettle mirrors algorithms.sliding_window.settle: delta
// changes the count of the slot the reservation was taken in (at), while
// that slot is stored; a slot whose count drops to 0 is removed, and a
// debt is at most one more limit per slot.
func slidingWindowSettle(s state, in settleInput) (state, bool) {
	at, events, window, delta := in.at, in.events, in.window, in.delta
	if s.expires == 0 {
		return s, false
	}
	slot := (floorDiv(at, slotLen(window)) + 1) * slotLen(window)
	if slot == s.a {
		n := settledCount(s.b, delta, events)
		s.c, s.b = s.c+n-s.b, n
		if n == 0 { // the newest slot is gone: the last older one is newest
			if len(s.log) == 0 {
				return state{}, true
			}
			k := len(s.log) - 1
			s.a, s.b, s.log = s.log[k].at, s.log[k].n, s.log[:k:k]
		}
		return s, true
	}
	for i, e := range s.log {
		if e.at != slot {
			continue
		}
		n := settledCount(e.n, delta, events)
		s.c += n - e.n
		log := slices.Clone(s.log) // the stored slice may be shared
		if n == 0 {
			log = slices.Delete(log, i, i+1)
		} else {
			log[i].n = n
		}
		s.log = log
		return s, true
	}
	return s, false
}

// slidingWindowLease mirrors algorithms.sliding_window's lease_end and
// grant: a lease ends no later than now's slot, and its units count
// there, as the cost did.
var slidingWindowLease = leaseTwin{
	end: func(_ state, in input, last, _ int64) int64 {
		l := slotLen(in.window)
		return min(last, (floorDiv(in.now, l)+1)*l)
	},
	longest: slotLease,
	grant: func(next state, _ input, p *quotaPlan) state {
		next.b += p.units
		next.c += p.units
		return next
	},
}
