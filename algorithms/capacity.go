package algorithms

import "time"

// OverCapacityAt answers reqs at now (µs of the store's clock, or of the
// caller's when the store's is not read) without the store when some zone
// asks for more than its cost cap (CostCap), which no state could ever
// admit; ok is false when every cost fits and the store must decide. Every
// store calls it first, so a cost from a header (9223372036854775807, say)
// never reaches the arithmetic of an algorithm or a script, and never
// touches state.
//
// An over-capacity zone is denied with RetryAfter the longest honest wait
// (NeverRetryAt: the window, or what remains of a calendar period; a
// smaller cost may pass then). When an enforced zone is over, the request
// is denied and nothing is read: every zone reports its capacity as
// remaining and no times. When only dry-run zones are over, decide runs on
// the others and the over ones are reported denied.
func OverCapacityAt(now int64, reqs []Request, decide func([]Request) ([]Decision, error)) (ds []Decision, ok bool, err error) {
	if CostsFit(reqs) {
		return nil, false, nil
	}
	ds, err = DecideOverCapacityAt(now, reqs, decide)
	return ds, true, err
}

// DecideOverCapacityAt is OverCapacityAt for reqs that CostsFit refused: a
// store that called CostsFit first, to read its clock only then, calls it
// instead of checking the costs twice.
func DecideOverCapacityAt(now int64, reqs []Request, decide func([]Request) ([]Decision, error)) ([]Decision, error) {
	enforced := false
	for _, r := range reqs {
		enforced = enforced || (r.Cost > CostCap(r) && !r.DryRun)
	}
	ds := make([]Decision, len(reqs))
	var fit []Request
	for i, r := range reqs {
		ds[i] = Decision{Allowed: true, Remaining: r.Limit.Capacity()}
		if r.Cost > CostCap(r) {
			ds[i].Allowed, ds[i].RetryAfter = false, r.Limit.NeverRetryAt(now)
		} else if !enforced {
			fit = append(fit, r)
		}
	}
	if len(fit) == 0 {
		return ds, nil
	}
	decided, err := decide(fit)
	if err != nil {
		return nil, err
	}
	j := 0
	for i, r := range reqs {
		if r.Cost <= CostCap(r) {
			ds[i], j = decided[j], j+1
		}
	}
	return ds, nil
}

// CostsFit reports whether every cost of reqs is within its cost cap:
// OverCapacityAt then leaves them all to the store. A store may call it
// first, to read its clock only for a request that needs it.
func CostsFit(reqs []Request) bool {
	for _, r := range reqs {
		if r.Cost > CostCap(r) {
			return false
		}
	}
	return true
}

// CostCap is the largest cost of r that a store may have to decide: its
// limit's capacity, or in a zone with overrides or a ban MaxEvents, the
// largest capacity an override can give. The store that reads a key's
// override and ban denies a cost above the capacity in force itself
// (docs/algorithms.md, Cost), after the ban: so an override governs the cost cap
// as it does the rest of its key's limit, and a banned key is answered as
// banned whatever its cost. A store that has applied the overrides
// already (the memory store) passes requests whose Overrides is cleared.
func CostCap(r Request) int64 {
	if r.Overrides || r.Bans() {
		return MaxEvents
	}
	return r.Limit.Capacity()
}

// NeverRetryAt is the Retry-After of a request of l, at now (µs), whose
// cost is above l's capacity: nothing it waits for admits it, so it is
// told the longest honest wait, the window, or for a calendar zone what
// remains of the period holding now (its window is 0), never a second
// that invites a retry every second. The period comes from l's Periods as
// the scripts read them, else from its Calendar.
func (l Limit) NeverRetryAt(now int64) time.Duration {
	if !l.HasPeriod() {
		return l.Window
	}
	span, ok := l.Periods.At(now)
	if !ok {
		start, end := l.Calendar.BoundsAt(time.UnixMicro(now))
		span = Span{start.UnixMicro(), end.UnixMicro()}
	}
	return time.Duration(span.End-now) * time.Microsecond
}
