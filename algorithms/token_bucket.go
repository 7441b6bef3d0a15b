package algorithms

import "time"

// tokenBucket mirrors luascripts/token_bucket.lua, GCRA-style: one event is
// window units and events units drain per microsecond, so every rate is
// exact. The level is held as whole events n and a fraction f < window
// units (level = n×window + f), since n×window reaches 10^9 × 366 days in
// µs: s.a is n, s.c is f and s.b the time they were counted.
//
// With max_delay (in.maxDelay, µs; 0 for none): a request over the limit
// whose turn comes within maxDelay is admitted with a reservation (the
// level goes past capacity; retry is then its wait, and remaining reads
// below 0); one that would wait longer is denied with the retry at which
// its wait is maxDelay, the earliest a retry can pass.
//
// A state whose time is ahead of now holds a quota lease's units, written
// as if taken at the lease's end (tokenBucketLease): GCRA's theoretical
// arrival time past the lease's end. Read at now, its level is what it will be
// then plus what drains until then (fill), so every admission before the
// lease's end leaves room for the lease's units at its end.
func tokenBucket(s state, in input) verdict {
	now, events, window, capacity, cost, maxDelay := in.now, in.events, in.window, in.capacity, in.cost, in.maxDelay
	n, f := int64(0), int64(0)
	if s.expires != 0 && now >= s.b {
		n, f = drain(s.a, s.c, now-s.b, events, window)
	} else if s.expires != 0 {
		n, f = fill(s.a, s.c, s.b-now, events, window)
	}
	used := n
	if f > 0 {
		used++
	}
	v := verdict{
		remaining:  capacity - used,
		reset:      drainTime(n, f, events, window),
		resetAfter: drainTime(n+cost, f, events, window),
		more:       tokenMore(n, f, events, window),
		moreAfter:  tokenMore(n+cost, f, events, window),
	}
	switch {
	case used+cost <= capacity:
		v.allowed = true
		v.next = state{a: n + cost, b: now, c: f, expires: now + v.resetAfter}
	case cost > capacity:
		v.retry = window
	default: // drain to capacity-cost events: n+cost-capacity events and f
		v.retry = drainTime(n+cost-capacity, f, events, window)
		if v.retry > maxDelay {
			// a retry then waits max_delay: t says when that is, never later
			v.retry -= maxDelay
			v.more = min(v.more, v.retry)
			break
		}
		// a reservation: one unit returns once the level is under capacity
		v.allowed = true
		v.moreAfter = drainTime(n+cost-capacity+1, f, events, window)
		v.next = state{a: n + cost, b: now, c: f, expires: now + v.resetAfter}
	}
	return v
}

// fill is the level n×window + f plus ahead×events units: the level
// ahead µs before the time it was counted at, what drains until then
// included. ahead is capped at maxTime, so the level stays an exact
// integer.
func fill(n, f, ahead, events, window int64) (int64, int64) {
	dn, df := mulDiv(min(ahead, maxTime), events, window)
	n, f = n+min(dn, maxTime), f+df
	if f >= window {
		n, f = n+1, f-window
	}
	return n, f
}

// RetryOrDelay reads a zone's retry value (µs): for a denial its retry
// after, for an admission its delay (a reservation's wait; 0 for none):
// the decide code of every store returns the one value for both.
func RetryOrDelay(allowed bool, retry int64) (retryAfter, delay time.Duration) {
	if allowed {
		return 0, time.Duration(retry) * time.Microsecond
	}
	return time.Duration(retry) * time.Microsecond, 0
}

// drain is the level n×window + f less elapsed×events units, floored at 0.
func drain(n, f, elapsed, events, window int64) (int64, int64) {
	if elapsed/window > n { // at least (n+1)×window×events ≥ the level drained
		return 0, 0
	}
	// elapsed < (n+1)×window, so the quotient is below (n+1)×events ≤ 2^61
	dn, df := mulDiv(elapsed, events, window)
	if dn > n || (dn == n && df >= f) {
		return 0, 0
	}
	n, f = n-dn, f-df
	if f < 0 {
		n, f = n-1, f+window
	}
	return n, f
}

// drainTime is how long n×window + f units take to drain, in µs, rounded
// up and capped at maxTime.
func drainTime(n, f, events, window int64) int64 {
	q, r := mulDiv(n, window, events)
	if q >= maxTime {
		return maxTime
	}
	return min(maxTime, q+ceilDiv(r+f, events))
}

// tokenMore is how long until the bucket holds one event fewer (remaining
// grows): the fraction f, or a whole event when there is none.
func tokenMore(n, f, events, window int64) int64 {
	switch {
	case f > 0:
		return ceilDiv(f, events)
	case n > 0:
		return ceilDiv(window, events)
	default:
		return 0
	}
}

// tokenBucketSettle mirrors algorithms.token_bucket.settle: the bucket,
// drained up to the later of now and its own time, gains or loses delta
// events; above capacity it is a debt that later requests wait out, up to
// the debt cap.
func tokenBucketSettle(s state, in settleInput) (state, bool) {
	now, events, window, capacity, delta := in.now, in.events, in.window, in.capacity, in.delta
	t, n, f := now, int64(0), int64(0)
	if s.expires != 0 {
		t = max(now, s.b)
		n, f = drain(s.a, s.c, t-s.b, events, window)
	}
	// a reservation (max_delay) may pass the cap: keep it whole
	limit := max(debtCap(capacity), n)
	n += clamp(delta, -limit, limit) // no overflow: n ≤ limit before
	switch {
	case n < 0:
		n, f = 0, 0
	case n >= limit:
		n, f = limit, 0
	}
	return state{a: n, b: t, c: f, expires: t + drainTime(n, f, events, window)}, true
}

// tokenBucketLease mirrors algorithms.token_bucket's lease_end, grant and
// lease_taken_at_end. A lease lasts no more than a slot (a twentieth of
// the window), since what drains meanwhile is held too, and ends no later
// than the bucket holds its units and what drains until its end, burst in
// all. Its units are taken as if at its end (GCRA: TAT' = max(TAT, end) +
// units × interval), written as the level at now: the greater of the
// level and what drains until the end, plus the units; what remains, the
// reset and more are the bucket's then. A give-back therefore counts only
// before the end and of the latest grant.
var tokenBucketLease = leaseTwin{
	end: func(_ state, in input, last, units int64) int64 {
		q, _ := mulDiv(in.capacity-units, in.window, in.events)
		return in.now + min(last-in.now, slotLen(in.window), q)
	},
	longest: slotLease,
	grant: func(next state, in input, p *quotaPlan) state {
		events, window := in.events, in.window
		n, f := next.a, next.c
		if dn, df := mulDiv(p.end-next.b, events, window); dn > n || (dn == n && df > f) {
			n, f = dn, df
		}
		n += p.units
		next = state{a: n, b: next.b, c: f, expires: next.b + drainTime(n, f, events, window), held: true}
		used := n
		if f > 0 {
			used++
		}
		p.remaining = in.capacity - used
		p.reset, p.more = drainTime(n, f, events, window), tokenMore(n, f, events, window)
		return next
	},
	takenAtEnd: true,
}
