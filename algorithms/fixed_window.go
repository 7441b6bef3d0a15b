package algorithms

import "time"

// fixedWindow mirrors luascripts/fixed_window.lua. Everything comes back at
// the window's end, so more and reset are the time to it whenever
// something is used, and 0 for a key with nothing used (its quota is whole).
func fixedWindow(s state, in input) verdict {
	now, events, window, cost := in.now, in.events, in.window, in.cost
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
func fixedWindowSettle(s state, in settleInput) (state, bool) {
	if s.expires == 0 || s.a != in.at-in.at%in.window {
		return s, false
	}
	s.b = settledCount(s.b, in.delta, in.events)
	return s, true
}

// spanAt is the calendar period of l holding now (µs): the one of
// l.Periods (Periods.At, as the script picks it), or, when now is outside
// them, the period the calendar itself gives. Only the memory store uses
// it, and its clock is the caller's, so the two agree but for a caller
// that passes Periods of another time (a test's injected clock).
func (l Limit) spanAt(now int64) Span {
	if span, ok := l.Periods.At(now); ok {
		return span
	}
	span, _ := l.Calendar.PeriodsAt(time.UnixMicro(now)).At(now)
	return span
}

// fixedPeriod mirrors luascripts/fixed_window.lua with period boundaries:
// fixedWindow whose window is the calendar period span holding in.now
// (in.window is unused). The state counts only in its own period; it
// expires at the period's end.
func fixedPeriod(s state, in input, span Span) verdict {
	now, events, cost := in.now, in.events, in.cost
	count := int64(0)
	if s.a == span.Start {
		count = s.b
	}
	reset := span.End - now
	v := verdict{remaining: events - count, resetAfter: reset, moreAfter: reset}
	if count > 0 {
		v.more, v.reset = reset, reset
	}
	if count+cost <= events {
		v.allowed = true
		v.next = state{a: span.Start, b: count + cost, expires: span.End}
	} else {
		v.retry = reset
	}
	return v
}

// fixedPeriodSettle is fixedWindowSettle for a calendar zone: delta
// changes the count of the reservation's period (the one of l holding
// in.at) while it is the stored one.
func fixedPeriodSettle(s state, l Limit, in settleInput) (state, bool) {
	if s.expires == 0 || s.a != l.spanAt(in.at).Start {
		return s, false
	}
	s.b = settledCount(s.b, in.delta, in.events)
	return s, true
}

// fixedWindowLease mirrors algorithms.fixed_window's lease_end and grant:
// a lease ends no later than the window or period holding its grant
// (next's expiry), and its units count there, as the cost did.
var fixedWindowLease = leaseTwin{
	end:     func(next state, _ input, last, _ int64) int64 { return min(last, next.expires) },
	longest: windowLease,
	steady:  true,
	grant: func(next state, _ input, p *quotaPlan) state {
		next.b += p.units
		return next
	},
}

// windowLease is the longest lease of a zone whose leases end with its
// window: the window, or for a period (a day at least) quota_lease's
// bound.
func windowLease(l Limit) time.Duration {
	if l.HasPeriod() {
		return MaxQuotaLease
	}
	return l.Window
}
