package algorithms

// tokenBucket mirrors luascripts/token_bucket.lua: one event is window units,
// and events units drain per microsecond.
func tokenBucket(s state, now, events, window, capacity, cost int64) verdict {
	level := int64(0)
	if s.expires != 0 {
		if elapsed := max(0, now-s.b); elapsed < ceilDiv(s.a, events) {
			level = s.a - elapsed*events
		}
	}
	full, need := capacity*window, cost*window
	v := verdict{
		remaining:  (full - level) / window,
		reset:      ceilDiv(level, events),
		resetAfter: ceilDiv(level+need, events),
	}
	switch {
	case level+need <= full:
		v.allowed = true
		v.next = state{a: level + need, b: now, expires: now + v.resetAfter}
	case need > full:
		v.retry = window
	default:
		v.retry = ceilDiv(level+need-full, events)
	}
	return v
}

// tokenBucketSettle mirrors algorithms.token_bucket.settle: the bucket,
// drained up to the later of now and its own time, gains or loses delta
// events; above capacity it is a debt that later requests wait out.
func tokenBucketSettle(s state, now, _, events, window, capacity, delta int64, _ string) (state, bool) {
	t, level := now, int64(0)
	if s.expires != 0 {
		t = max(now, s.b)
		if elapsed := t - s.b; elapsed < ceilDiv(s.a, events) {
			level = s.a - elapsed*events
		}
	}
	delta = clamp(delta, -debtCap(capacity), debtCap(capacity)) // no overflow below
	level = clamp(level+delta*window, 0, debtCap(capacity)*window)
	return state{a: level, b: t, expires: t + ceilDiv(level, events)}, true
}
