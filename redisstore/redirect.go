package redisstore

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// While a Cluster moves a slot, a call to a key in it can be answered
// MOVED or ASK after go-redis's own redirects (it follows three, at once),
// TRYAGAIN (a key of the call is on either side), CLUSTERDOWN (the slot
// has no owner for a moment) or, from the decide code, a read of a key
// the move already took (nonLocalKey). Redis ran nothing then, so such a call is
// sent again after a pause, doubling from firstSlotWait up to
// maxSlotWait, until it is answered otherwise or its retry budget
// (slotRetryBudget, or the call's deadline if that comes first) would be
// passed by the next pause: it then fails at once with the reply it was
// last given, for failure_mode to decide.
const (
	firstSlotWait = time.Millisecond
	maxSlotWait   = 32 * time.Millisecond
	// slotRetryBudget is how long a call whose slot keeps moving is sent
	// again: a slot's move settles within milliseconds, so 25 ms answers a
	// decision during a reshard, while a slot that stays broken fails
	// well before the default 100 ms timeout. A decision that waited its
	// timeout out would count a timeout toward the breaker, and its batch's
	// leader, holding the next batch, would hold the decisions of every
	// other slot as long.
	slotRetryBudget = 25 * time.Millisecond
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
	return redis.IsTryAgainError(err) || redis.IsClusterDownError(err) || nonLocalKey(err)
}

// nonLocalKey reports a script's failure to read a key of its slot that a
// moving slot has already taken to the other node (a ban, override or
// lease bookkeeping key, derived from the state key's name, not declared):
// the decide code reads them before it writes its state, so a call of
// one request that failed so may be sent again (at most an earlier zone's
// ban was set: sent again, the request is denied by it, as it was).
func nonLocalKey(err error) bool {
	return strings.Contains(err.Error(), "non local key")
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
// slot was moving, until none is, or the next pause would pass the retry
// budget (slotRetryBudget or ctx's deadline, whichever comes first): those
// still moving then fail at once with the reply they were last given.
// Before each pause, stillMoving (if not nil) is told which calls are
// retried: every other call has its answer for good.
func (r *runner) run(ctx context.Context, calls []*call, stillMoving func([]*call)) {
	r.runOnce(ctx, calls)
	end := time.Now().Add(r.slotBudget())
	if deadline, ok := ctx.Deadline(); ok && deadline.Before(end) {
		end = deadline
	}
	for wait := firstSlotWait; ; wait = min(2*wait, maxSlotWait) {
		again := moving(calls)
		if len(again) == 0 {
			return
		}
		if stillMoving != nil {
			stillMoving(again)
		}
		if !pause(ctx, wait, end) {
			return
		}
		r.runOnce(ctx, again)
		calls = again
	}
}

// slotBudget is r's retry budget: slotRetryBudget unless a test set one.
func (r *runner) slotBudget() time.Duration {
	if r.slotRetries > 0 {
		return r.slotRetries
	}
	return slotRetryBudget
}

// pause waits d and reports true; it reports false at once when end comes
// within d (no time would be left for a call: the answer would be the
// same), and false when ctx ends first.
func pause(ctx context.Context, d time.Duration, end time.Time) bool {
	if time.Until(end) <= d {
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
