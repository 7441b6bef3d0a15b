package algorithms

// MaxDebtFactor bounds what a settlement may take beyond a zone's limit: a
// key's count never exceeds MaxDebtFactor × its capacity (a debt of one
// whole limit at most). A response that reports more is charged up to that
// bound, so a single huge report cannot lock a key out for more than about
// one more window, and every quantity the scripts compute stays an exact
// integer (for token_bucket 2 × burst × window ≤ 2^53).
const MaxDebtFactor = 2

// Settlement corrects what an admitted request took in one zone, once its
// response is known.
type Settlement struct {
	// Key and Limit are the zone's, as in the Request.
	Key   string
	Limit Limit
	// At is the Decision's At: when the reservation was taken (µs).
	At int64
	// Delta is what to take in addition to the reservation: negative gives
	// back (a refund), positive takes more, possibly beyond the limit (a
	// debt that later requests wait out, bounded by MaxDebtFactor).
	Delta int64
	// Slot, for a Concurrency zone, is the Request's Slot to give back.
	Slot string
}

// Settles reports whether any of reqs is settled after its response.
func Settles(reqs []Request) bool {
	for i := range reqs {
		if reqs[i].Settles {
			return true
		}
	}
	return false
}

// debtCap is the most a key's count may reach through settlements.
func debtCap(capacity int64) int64 { return MaxDebtFactor * capacity }

// settledCount is count n changed by a settlement's delta: never below 0,
// and a debt (delta > 0) takes it no higher than debtCap(events) or n,
// whichever is more. A refund is never capped: one made under a smaller
// limit than the count's (a per-request limit, a give-back under the
// zone's own limit while an override was in force) must not lower the
// count below what was admitted. The scripts' settled is the twin.
func settledCount(n, delta, events int64) int64 {
	if delta > 0 {
		return min(n+delta, max(n, debtCap(events)))
	}
	return max(0, n+delta)
}

// clamp bounds n to [low, high].
func clamp(n, low, high int64) int64 { return max(low, min(n, high)) }
