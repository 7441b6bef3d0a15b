package algorithms

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

// logEntry is one time in a sliding_log: the units admitted (or settled)
// at it. A log holds one entry per time, so its length is bounded by the
// requests in a window, never by their cost.
type logEntry struct {
	at, n int64 // µs; units, ≥ 1
}

// settleInput is what an algorithm settles with, in µs where it is a
// time: the arguments of its script's settle, passed by value as input
// is. Fields an algorithm has no use for are ignored (only concurrency
// reads slot, only an algorithm with a burst capacity).
type settleInput struct {
	now      int64  // the store's clock
	at       int64  // Settlement.At: the reservation's time (its Decision's At)
	events   int64  // Limit.Events: the events per window (or period)
	window   int64  // Limit.Window; 0 for a calendar zone
	capacity int64  // Limit.Capacity: the burst, else events
	delta    int64  // Settlement.Delta: taken beyond the reservation (< 0 gives back; RenewSlot renews)
	slot     string // Settlement.Slot: concurrency's slot to give back or renew
}

// settleInputFor is what s settles with at now (µs).
func settleInputFor(s Settlement, now int64) settleInput {
	return settleInput{now: now, at: s.At, events: s.Limit.Events, window: s.Limit.Window.Microseconds(),
		capacity: s.Limit.Capacity(), delta: s.Delta, slot: s.Slot}
}

// settleFunc is one algorithm's settlement (its table entry's settle), the
// twin of its script's settle: s is the key's state (zero if absent), in
// the settlement and its limit. It returns the new state, or false to
// leave the key alone.
type settleFunc func(s state, in settleInput) (state, bool)
