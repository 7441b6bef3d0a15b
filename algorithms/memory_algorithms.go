package algorithms

import (
	"math"
	"math/bits"
)

// The Go twins of luascripts/*.lua, run by the memory store. They must
// decide exactly as the scripts do (the differential test holds them to it),
// so they use the same integer formulas, in microseconds.

// state is one key's stored state. a, b and c mean what the algorithm's
// script stores in its string; log is sliding_log's sorted set (a its
// units).
type state struct {
	a, b, c int64
	log     []logEntry
	slots   map[string]int64 // concurrency: slot → expiry (µs), or minus it for a tombstone
	expires int64            // µs; the key is gone from then on, as with Redis PX
	held    bool             // a concurrency slot or reservation: forgotten last (see holds)
}

// verdict is one zone's answer before the all-or-nothing commit.
type verdict struct {
	allowed    bool
	remaining  int64 // before this request
	retry      int64 // µs, when denied
	more       int64 // µs until a unit of what is used returns, if nothing is consumed
	moreAfter  int64 // the same, once this request is consumed
	reset      int64 // µs until whole, if nothing is consumed
	resetAfter int64 // µs until whole, once this request is consumed
	next       state // stored when the request is admitted
}

// input is what an algorithm decides with, in µs where it is a time: the
// arguments of its script (KEYS aside), gathered in one value that is
// passed by value, so a decision still allocates nothing. Fields an
// algorithm has no use for are ignored: only one with a burst reads
// capacity, only one with max_delay maxDelay; concurrency takes one slot
// whatever the cost; a calendar zone (fixedPeriod) decides by its period's
// span, not window.
type input struct {
	now      int64 // the store's clock
	events   int64 // Limit.Events: the events per window (or period)
	window   int64 // Limit.Window; 0 for a calendar zone
	capacity int64 // Limit.Capacity: token_bucket's burst, else events
	cost     int64 // Request.Cost: the units the request takes
	// maxDelay is the max_delay (Limit.MaxDelay) of an algorithm that has
	// one; 0, deny at once, for a dry run (it never holds a request) and
	// for every other algorithm (inputFor).
	maxDelay int64
}

// inputFor is what r decides with at now (µs).
func inputFor(r Request, now int64) input {
	l := r.Limit
	in := input{now: now, events: l.Events, window: l.Window.Microseconds(), capacity: l.Capacity(), cost: r.Cost}
	in.maxDelay = r.AppliedMaxDelay().Microseconds()
	return in
}

// decideFunc is one algorithm (its table entry's decide): s is the key's
// state (zero if absent), in the request and its limit.
type decideFunc func(s state, in input) verdict

// maxTime caps every duration an algorithm reports or stores, in µs (2^52,
// about 142 years): a token bucket of 10^9 refilled once a year takes
// longer than that to drain, and the scripts' doubles are exact below 2^53.
const maxTime = 1 << 52

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// mulDiv is floor(a×b/c) and a×b mod c, exactly, for a, b ≥ 0 and c > 0;
// the quotient saturates at math.MaxInt64. prelude.lua's mul_div is its
// twin: these products (events × window and the like) reach 2^75.
func mulDiv(a, b, c int64) (q, r int64) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64, 0
	}
	uq, ur := bits.Div64(hi, lo, uint64(c))
	if uq > math.MaxInt64 {
		return math.MaxInt64, 0
	}
	return int64(uq), int64(ur)
}

// ceilMulDiv is ceil(a×b/c), exactly; it saturates as mulDiv does.
func ceilMulDiv(a, b, c int64) int64 {
	q, r := mulDiv(a, b, c)
	if r > 0 && q < math.MaxInt64 {
		q++
	}
	return q
}
