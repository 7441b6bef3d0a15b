package sluice

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// Slot renewal: a concurrency zone's slot lives its zone's window from
// when it was taken or last renewed, so a request that runs longer than
// the window (a stream, a WebSocket, a slow upstream) renews its slot
// until its response is done: at most events requests run at once however
// long they last, and a crashed instance's slots end a window after
// their last renewal.
//
// Renewals are batched per store: one goroutine per store with slots
// held keeps them by due time (a heap), sleeps until the first falls due,
// renews it with the slots that fall due within half their interval, in
// Settles of at most maxRenewalsPerCall (one call on Redis each, riding
// the batcher with decisions and settlements), and stops when no slot is
// held.

// minRenewEvery is the shortest time between renewals of one slot.
const minRenewEvery = time.Millisecond

// maxRenewTimeout bounds one renewal call.
const maxRenewTimeout = time.Second

// maxRenewalsPerCall bounds the slots one call renews: a call blocks
// Redis while it runs, so thousands of streams renewed in one call would
// hold every other decision past its timeout. 256 is the most keys the
// Redis store puts in one call of decisions.
const maxRenewalsPerCall = 256

// renewEvery is how often a slot of window is renewed: every third of
// it (so two renewals in a row may fail before it ends), at least
// minRenewEvery.
func renewEvery(window time.Duration) time.Duration {
	return max(window/3, minRenewEvery)
}

// slotRenewals is the process's slot renewers, one per store.
var slotRenewals = renewals{byStore: make(map[algorithms.Store]*renewer)}

// renewals holds the renewers; mu guards every renewer's slots too. Each
// operation under mu costs O(log n) in the n slots held on its store (a
// start, a stop, a renewal), never a walk over them all, so a request's
// slot costs the same with ten slots held or a hundred thousand.
type renewals struct {
	mu      sync.Mutex
	byStore map[algorithms.Store]*renewer
}

// renewer renews the slots held on one store, earliest due first.
type renewer struct {
	store    algorithms.Store
	slots    map[string]*renewedSlot // by slot id; guarded by renewals.mu
	queue    slotQueue               // the same slots by due time; guarded by renewals.mu
	wake     chan struct{}           // the earliest due time came sooner, or no slot is left
	logger   *zap.Logger
	failures throttle // logs failed renewals at most once per logInterval
}

// renewedSlot is one slot being renewed.
type renewedSlot struct {
	renewal algorithms.Settlement
	every   time.Duration
	due     time.Time
	index   int // in its renewer's queue
}

// renewedSlots reuses the records of slots given back, so that a
// request's slot allocates nothing once warm.
var renewedSlots = sync.Pool{New: func() any { return new(renewedSlot) }}

// start renews, on store, the slots reqs took (decided as ds), from now
// until stop; logger logs the renewals that fail, when start begins the
// store's renewer.
func (rs *renewals) start(store algorithms.Store, logger *zap.Logger, reqs []algorithms.Request, ds []algorithms.Decision) {
	now := time.Now()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var rn *renewer
	sooner := false
	for i, r := range reqs {
		if r.Slot == "" || !ds[i].Allowed {
			continue
		}
		if rn == nil {
			rn = rs.renewerOf(store, logger)
		}
		every := renewEvery(r.Limit.Window)
		sooner = rn.hold(renewedSlot{renewal: algorithms.Renewal(r), every: every, due: now.Add(every)}) || sooner
	}
	if sooner {
		rn.poke()
	}
}

// hold adds l to rn's slots (or replaces the slot of its id), and
// reports whether it is now the first due; rs.mu is held.
func (rn *renewer) hold(l renewedSlot) (first bool) {
	if old := rn.slots[l.renewal.Slot]; old != nil {
		l.index = old.index
		*old = l
		heap.Fix(&rn.queue, old.index)
		return rn.queue[0] == old
	}
	held := renewedSlots.Get().(*renewedSlot)
	*held = l
	rn.slots[l.renewal.Slot] = held
	heap.Push(&rn.queue, held)
	return rn.queue[0] == held
}

// renewerOf is store's renewer, started if none runs; rs.mu is held.
func (rs *renewals) renewerOf(store algorithms.Store, logger *zap.Logger) *renewer {
	rn := rs.byStore[store]
	if rn == nil {
		if logger == nil {
			logger = zap.NewNop()
		}
		rn = &renewer{store: store, slots: make(map[string]*renewedSlot), wake: make(chan struct{}, 1),
			logger: logger, failures: throttle{interval: logInterval}}
		rs.byStore[store] = rn
		go rs.run(rn)
	}
	return rn
}

// stop ends the renewal of reqs' slots on store (their response is done).
// The renewer is woken only when no slot is left, so that it ends: a
// slot gone never makes a renewal due sooner.
func (rs *renewals) stop(store algorithms.Store, reqs []algorithms.Request) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rn := rs.byStore[store]
	if rn == nil {
		return
	}
	for _, r := range reqs {
		if l := rn.slots[r.Slot]; r.Slot != "" && l != nil {
			delete(rn.slots, r.Slot)
			heap.Remove(&rn.queue, l.index)
			*l = renewedSlot{}
			renewedSlots.Put(l)
		}
	}
	if len(rn.slots) == 0 {
		rn.poke()
	}
}

// poke wakes rn's goroutine, which then looks at its slots again.
func (rn *renewer) poke() {
	select {
	case rn.wake <- struct{}{}:
	default:
	}
}

// run renews rn's slots as they fall due, until none is held. A batch
// (the slots due at one time) goes out in calls of at most
// maxRenewalsPerCall, each taken under the lock on its own, so that a
// start or a stop never waits for more than one call's worth of slots.
func (rs *renewals) run(rn *renewer) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var batch time.Time // when the batch being renewed fell due; zero between batches
	for {
		now, going := time.Now(), !batch.IsZero()
		if going {
			now = batch
		}
		due, next, ok := rs.due(rn, now, going)
		if !ok {
			return
		}
		if len(due) > 0 {
			rn.renew(due)
			batch = time.Time{}
			if len(due) == maxRenewalsPerCall {
				batch = now
			}
			continue
		}
		batch = time.Time{}
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-rn.wake: // Reset discards a pending tick (Go 1.23 timers)
		}
	}
}

// due takes, when the first of rn's slots is due at now (or going on
// with a batch that fell due at now), the renewals of the slots in due
// order that fall due within half their interval of now, at most
// maxRenewalsPerCall (one call renews them), and moves them to their next
// time; next is the earliest time one falls due after that. Slots of one
// zone taken close together so fall into step and are renewed together.
// ok is false, and rn is gone, when rn holds no slot.
func (rs *renewals) due(rn *renewer, now time.Time, going bool) (due []algorithms.Settlement, next time.Time, ok bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if len(rn.queue) == 0 {
		delete(rs.byStore, rn.store)
		return nil, next, false
	}
	if first := rn.queue[0]; !going && first.due.After(now) {
		return nil, first.due, true
	}
	for l := rn.queue[0]; len(due) < maxRenewalsPerCall && !l.due.After(now.Add(l.every/2)); l = rn.queue[0] {
		due = append(due, l.renewal)
		l.due = now.Add(l.every)
		heap.Fix(&rn.queue, 0)
	}
	return due, rn.queue[0].due, true
}

// renew sends the renewals in Settles of at most maxRenewalsPerCall, one
// after another, each bounded by the shortest interval among them (and
// maxRenewTimeout). A failed renewal is not retried: the slot is renewed
// again at its next time, and lives until a window after its last
// renewal that succeeded.
func (rn *renewer) renew(due []algorithms.Settlement) {
	for len(due) > 0 {
		n := min(len(due), maxRenewalsPerCall)
		rn.renewCall(due[:n])
		due = due[n:]
	}
}

// renewCall sends renewals in one Settle. A failure is logged, at most
// one line per logInterval per store, with the slots whose renewal
// failed since the last line: each lives until a window after its last
// renewal that succeeded, and a slot that ends while its request runs
// lets one more request in. The line's message and its field "leases"
// (the slots' count) are as operators have always seen them: a "lease"
// there is a slot.
func (rn *renewer) renewCall(renewals []algorithms.Settlement) {
	timeout := maxRenewTimeout
	for _, s := range renewals {
		timeout = min(timeout, renewEvery(s.Limit.Window))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := rn.store.Settle(ctx, renewals); err != nil {
		if n, ok := rn.failures.addAt(time.Now(), len(renewals)); ok {
			rn.logger.Warn("renewing concurrency leases failed; a lease not renewed within its window ends while its request runs",
				zap.Error(err), zap.Int("leases", n))
		}
	}
}

// slotQueue is a renewer's slots as a min-heap by due time
// (container/heap), each knowing its index so that a stop removes it in
// O(log n).
type slotQueue []*renewedSlot

func (q slotQueue) Len() int           { return len(q) }
func (q slotQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q slotQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}

func (q *slotQueue) Push(x any) {
	l := x.(*renewedSlot)
	l.index = len(*q)
	*q = append(*q, l)
}

func (q *slotQueue) Pop() any {
	old := *q
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return l
}
