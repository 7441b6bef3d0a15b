package algorithms

// The Go twins of luascripts/*.lua, run by the memory store. They must
// decide exactly as the scripts do (the differential test holds them to it),
// so they use the same integer formulas, in microseconds.

// state is one key's stored state. a, b and c mean what the algorithm's
// script stores in its string; log is sliding_log's sorted set.
type state struct {
	a, b, c int64
	log     []int64
	expires int64 // µs; the key is gone from then on, as with Redis PX
}

// verdict is one zone's answer before the all-or-nothing commit.
type verdict struct {
	allowed    bool
	remaining  int64 // before this request
	retry      int64 // µs, when denied
	reset      int64 // µs until whole, if nothing is consumed
	resetAfter int64 // µs until whole, once this request is consumed
	next       state // stored when the request is admitted
}

// decideFunc is one algorithm: s is the key's state (zero if absent), now the
// time, window in µs, capacity the burst (token_bucket) or events.
type decideFunc func(s state, now, events, window, capacity, cost int64) verdict

var decideFuncs = map[Algorithm]decideFunc{
	FixedWindow:   fixedWindow,
	SlidingWindow: slidingWindow,
	SlidingLog:    slidingLog,
	TokenBucket:   tokenBucket,
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
