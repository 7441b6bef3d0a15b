package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// While a Cluster moves a slot, a call to a key in it can be answered
// MOVED or ASK after go-redis's own redirects (it follows three, at once),
// TRYAGAIN (a key of the call is on either side) or CLUSTERDOWN (the slot
// has no owner for a moment). Redis ran nothing then, so such a call is
// sent again after a pause, doubling from firstSlotWait up to
// maxSlotWait, until it is answered otherwise or the call's deadline
// comes: the move settles within milliseconds, and a decision that waits
// for it is answered instead of failing to failure_mode.
// A call without a deadline is sent at most maxSlotTries times.
const (
	firstSlotWait = time.Millisecond
	maxSlotWait   = 32 * time.Millisecond
	maxSlotTries  = 100 // about 3 s of pauses
)

// slotMoving reports a reply meaning that the call did not run because its
// slot is moving between Cluster nodes: safe to send again.
func slotMoving(err error) bool {
	if err == nil {
		return false
	}
	if _, ok := redis.IsMovedError(err); ok {
		return true
	}
	if _, ok := redis.IsAskError(err); ok {
		return true
	}
	return redis.IsTryAgainError(err) || redis.IsClusterDownError(err)
}

// moving returns the calls answered slotMoving.
func moving(calls []*call) []*call {
	var out []*call
	for _, c := range calls {
		if slotMoving(c.err) {
			out = append(out, c)
		}
	}
	return out
}

// run runs calls (runOnce), then sends again, after a pause, those whose
// slot was moving, until none is, ctx ends, or each was sent maxSlotTries
// times. A call that is still moving when the pause would reach ctx's
// deadline waits out the deadline and fails with the reply it was last
// given, for failure_mode to decide.
func (r *runner) run(ctx context.Context, calls []*call) {
	r.runOnce(ctx, calls)
	wait := firstSlotWait
	for range maxSlotTries - 1 {
		again := moving(calls)
		if len(again) == 0 || !pause(ctx, wait) {
			return
		}
		r.runOnce(ctx, again)
		wait = min(2*wait, maxSlotWait)
	}
}

// pause waits d and reports true, or, when ctx's deadline comes within d
// (no time would be left for a call) or ctx ends first, waits for ctx's
// end and reports false.
func pause(ctx context.Context, d time.Duration) bool {
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= d {
		<-ctx.Done()
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
