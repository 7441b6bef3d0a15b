package algorithms

// OverCapacity answers reqs without the store when some zone asks for more
// than its capacity, which no state could ever admit; ok is false when
// every cost fits and the store must decide. Every store calls it first, so
// a cost from a header (9223372036854775807, say) never reaches the
// arithmetic of an algorithm or a script, and never touches state.
//
// An over-capacity zone is denied with RetryAfter of one window (a smaller
// cost may pass then). When an enforced zone is over, the request is denied
// and nothing is read: every zone reports its capacity as remaining and no
// times. When only dry-run zones are over, decide runs on the others and
// the over ones are reported denied.
func OverCapacity(reqs []Request, decide func([]Request) ([]Decision, error)) (ds []Decision, ok bool, err error) {
	over, enforced := 0, false
	for _, r := range reqs {
		if r.Cost > r.Limit.Capacity() {
			over++
			enforced = enforced || !r.DryRun
		}
	}
	if over == 0 {
		return nil, false, nil
	}
	ds = make([]Decision, len(reqs))
	var fit []Request
	for i, r := range reqs {
		ds[i] = Decision{Allowed: true, Remaining: r.Limit.Capacity()}
		if r.Cost > r.Limit.Capacity() {
			ds[i].Allowed, ds[i].RetryAfter = false, r.Limit.Window
		} else if !enforced {
			fit = append(fit, r)
		}
	}
	if len(fit) == 0 {
		return ds, true, nil
	}
	decided, err := decide(fit)
	if err != nil {
		return nil, true, err
	}
	j := 0
	for i, r := range reqs {
		if r.Cost <= r.Limit.Capacity() {
			ds[i], j = decided[j], j+1
		}
	}
	return ds, true, nil
}
