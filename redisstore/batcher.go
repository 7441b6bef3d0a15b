package redisstore

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// Batch bounds. A call decides at most maxBatchRequests requests and
// maxBatchKeys zone keys, since one call blocks Redis while it runs, and
// at most DefaultInFlight calls of one store are in flight at once (a call
// that only retries a moving Cluster slot gives its place back: early).
const (
	maxBatchRequests = 64
	maxBatchKeys     = 256
	// DefaultInFlight is how many calls one store keeps in flight. One is
	// enough: the requests that wait meanwhile share the next call, so
	// batches grow with load, while more calls in flight send smaller
	// batches and spend more CPU per decision in Caddy and Redis
	// (docs/performance.md). Where the round trip is long, more in flight
	// would overlap them (Options.InFlight).
	DefaultInFlight = 1
)

// pending is one Allow, Peek or settlement waiting for its call.
type pending struct {
	now, mode string // the dispatcher's per-request arguments
	reqs      []algorithms.Request
	ss        []algorithms.Settlement // instead of reqs, in mode settle
	gbs       []algorithms.GiveBack   // instead of reqs or ss, in mode settle: quota lease give-backs

	deadline    time.Time // the caller's, if hasDeadline
	hasDeadline bool

	ds    []algorithms.Decision
	taken []bool // give-backs': whether each was taken
	err   error

	done  chan struct{} // one signal: decided, or lead batch
	state pendingState  // guarded by batcher.mu
	batch []*pending    // when state is leading: the batch to send
	early early         // when state is leading: its call's early answers
	alone [1]*pending   // the batch of a request sent alone, not allocated

	// abandoned is set, and read, by p's caller only: it gave up while p
	// was in a call, which may still write p and signal done.
	abandoned bool
}

type pendingState uint8

const (
	queued  pendingState = iota // in batcher.queue
	sent                        // taken into a batch someone else sends
	leading                     // taken, and this caller sends the batch
)

// batcher lets concurrent requests of one store share calls. A request
// that takes the last call free first yields to the callers already
// runnable, so that those that reach the store meanwhile join its call,
// then sends; when none did, it sends alone, at once: an idle store adds
// no latency. While
// inFlight calls are out, requests queue, and each call that returns hands
// everything queued (up to the batch bounds) to one of the queued callers,
// which sends it as the next call. That caller is the one that may wait
// longest (the latest deadline, or none), so the call, which runs until
// then, never holds its sender past the sender's own deadline, and the
// sender makes the call itself: no goroutine is started and none is woken
// but the callers.
type batcher struct {
	send     func(ctx context.Context, batch []*pending, e *early) // fills ds, err
	inFlight int

	mu      sync.Mutex
	queue   []*pending
	running int // calls out

	free   sync.Pool    // *pending, each with its done channel
	timers sharedTimers // the deadlines of WithTimeout contexts
}

// get returns a pending to fill, from those given back by release: a
// request that waits needs a pending and a channel, and once it has its
// answer neither is used again.
func (b *batcher) get() *pending {
	if p, ok := b.free.Get().(*pending); ok {
		return p
	}
	return new(pending)
}

// release gives p back for a later request, unless p's caller abandoned
// it to a call that may still write it. p's decisions, and anything read
// from p, must have been taken before.
func (b *batcher) release(p *pending) {
	if p.abandoned {
		return
	}
	*p = pending{done: p.done}
	b.free.Put(p)
}

// do decides p, in a call of its own or of a batch. When ctx ends while p
// waits, do returns ctx.Err() at once; p may still be decided (and consume)
// in a call already sent. A caller chosen to send a batch sends it even if
// its ctx ends meanwhile, since the others in the batch wait on it; it
// returns when the call does, by its own deadline, which is the batch's
// latest.
func (b *batcher) do(ctx context.Context, p *pending) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.deadline, p.hasDeadline = ctx.Deadline()
	b.mu.Lock()
	if b.running < b.inFlight {
		b.running++
		last := b.running == b.inFlight
		b.mu.Unlock()
		if leader := b.gather(p, last); leader != p {
			leader.done <- struct{}{}
			return b.wait(ctx, p)
		}
		return b.lead(ctx, p, p.batch)
	}
	if p.done == nil {
		p.done = make(chan struct{}, 1)
	}
	p.state = queued
	b.enqueue(p)
	b.mu.Unlock()
	return b.wait(ctx, p)
}

// enqueue queues p: a settlement at the end, a decision before the
// settlements queued, so that a request never waits on give-backs and
// refunds (a reload's or a sweep's may fill several calls). b.mu is held.
func (b *batcher) enqueue(p *pending) {
	i := len(b.queue)
	if !p.settles() {
		for i > 0 && b.queue[i-1].settles() {
			i--
		}
	}
	b.queue = slices.Insert(b.queue, i, p)
}

// gather builds the call that p, holding a place in flight, sends: p and,
// when p took the last place (last), the requests that queue while p
// yields (runtime.Gosched, which returns at once when no other goroutine
// is runnable); with places left they would send calls of their own. It
// returns the batch's leader, which p wakes unless it is p.
func (b *batcher) gather(p *pending, last bool) *pending {
	if last {
		runtime.Gosched()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		p.alone[0] = p
		p.state, p.batch = leading, p.alone[:]
		return p
	}
	if p.done == nil {
		p.done = make(chan struct{}, 1)
	}
	return b.take(p)
}

// wait waits for p's decision, or for p's turn to lead a batch. When ctx
// ends first, p leaves the queue, or the batch it was sent in, and wait
// returns ctx's error; a leader still sends its batch.
func (b *batcher) wait(ctx context.Context, p *pending) error {
	ended, expired := b.timers.waitOn(ctx)
	var err error
	select {
	case <-p.done:
	case <-ended:
		err = ctx.Err()
	case <-expired:
		if err = ctx.Err(); err == nil { // a deadline read off the wall clock
			err = context.DeadlineExceeded
		}
	}
	if err != nil {
		if b.abandon(p) {
			p.abandoned = true // p's fields may still be written by a sender
			return err
		}
		<-p.done
	}
	if p.state == leading { // written before the signal
		return b.lead(ctx, p, p.batch)
	}
	return p.err
}

// abandon takes p out of the queue if it is still there, reporting whether
// its caller may go: a leader may not (its batch waits on it); a request
// sent in another's batch may, and its decision is dropped.
func (b *batcher) abandon(p *pending) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch p.state {
	case queued:
		b.queue = slices.DeleteFunc(b.queue, func(q *pending) bool { return q == p })
		return true
	case sent:
		return true
	}
	return false
}

// lead sends batch, in which own, the caller's request, has the latest
// deadline (see take), and returns own's error.
func (b *batcher) lead(ctx context.Context, own *pending, batch []*pending) error {
	b.call(ctx, own, batch)
	return own.err
}

// call sends batch, then, whatever happens in send (a panic too), hands the
// next batch, if any queued, to its leader, and wakes the others. A panic
// in send fails every request of the batch not yet answered with an error
// instead of going on up: a store that stopped handing on would leave
// every later decision waiting out its timeout.
func (b *batcher) call(ctx context.Context, own *pending, batch []*pending) {
	own.early = early{b: b, own: own} // in own, which lives as long: no allocation
	e := &own.early
	defer b.finish(e, batch)
	defer func() {
		if r := recover(); r != nil {
			err := fmt.Errorf("deciding a batch of %d: panic: %v", len(batch), r)
			for _, p := range batch {
				if !e.woke(p) {
					p.err = err
				}
			}
		}
	}()
	callCtx, cancel := batchContext(ctx, own)
	defer cancel()
	b.send(callCtx, batch, e)
}

// finish hands on the next batch, unless send did, and wakes batch's
// callers but own and those send answered early.
func (b *batcher) finish(e *early, batch []*pending) {
	e.handOn()
	for _, p := range batch {
		if p != e.own && !e.woke(p) {
			p.done <- struct{}{}
		}
	}
}

// early lets a send answer part of its batch, and give back its place in
// flight, before its call returns: on Cluster, while one slot's call is
// sent again (redirect.go), the requests of the other slots have their
// answers, and the requests queued behind the batch need not wait for the
// retries. Used by the sender's goroutine only; a nil early does nothing.
type early struct {
	b        *batcher
	own      *pending
	woken    map[*pending]struct{} // answered early: their callers may reuse them
	handedOn bool
}

// answer wakes the callers of group, whose decisions are written, but own:
// own's caller is the sender, which returns with the call, after the
// moving slots' retries (at most slotRetryBudget), even when own's slot
// was answered early.
func (e *early) answer(group []*pending) {
	if e == nil {
		return
	}
	for _, p := range group {
		if p == e.own {
			continue
		}
		if e.woken == nil {
			e.woken = make(map[*pending]struct{})
		}
		e.woken[p] = struct{}{}
		p.done <- struct{}{}
	}
}

// woke reports whether answer woke p's caller.
func (e *early) woke(p *pending) bool {
	_, ok := e.woken[p]
	return ok
}

// handOn hands the next batch, if any queued, to its leader, or gives back
// the batch's place in flight; once. Called early (once some of the
// batch's slots were answered), the rest of the call only retries moving
// slots, a short while (slotRetryBudget), beside the next batch's call; a
// call none of whose slots was answered keeps its place while it retries,
// so calls out stay within inFlight.
func (e *early) handOn() {
	if e == nil || e.handedOn {
		return
	}
	e.handedOn = true
	b := e.b
	b.mu.Lock()
	next := b.take(nil)
	if next == nil {
		b.running--
	}
	b.mu.Unlock()
	if next != nil {
		next.done <- struct{}{}
	}
}

// take removes the next batch from the queue, after first if first is
// not nil, marks it, and returns its leader: the request that may wait
// longest (no deadline, else the latest; the first of equals), so that no
// request of the batch outlives the caller that sends it. b.mu is held.
func (b *batcher) take(first *pending) *pending {
	n, keys, size := 0, 0, 0
	if first != nil {
		keys, size = first.zones(), 1
	}
	for n < len(b.queue) && size+n < maxBatchRequests {
		keys += b.queue[n].zones()
		if size+n > 0 && keys > maxBatchKeys {
			break
		}
		n++
	}
	if size+n == 0 {
		return nil
	}
	batch := make([]*pending, 0, size+n)
	if first != nil {
		batch = append(batch, first)
	}
	batch = append(batch, b.queue[:n]...)
	b.queue = slices.Delete(b.queue, 0, n)
	leader := batch[0]
	for _, p := range batch {
		p.state = sent
		if leader.hasDeadline && (!p.hasDeadline || p.deadline.After(leader.deadline)) {
			leader = p
		}
	}
	leader.state, leader.batch = leading, batch
	return leader
}

// batchContext is the context a batch's call runs under: own's, the
// leader's, bounded by its deadline, the latest in the batch (see take),
// but not cancelled with it: one client going away must not fail the
// others, nor, alone, cut its call short (go-redis would close the
// connection as bad, and count a failure).
func batchContext(ctx context.Context, own *pending) (context.Context, context.CancelFunc) {
	if !own.hasDeadline {
		return context.WithoutCancel(ctx), func() {}
	}
	return context.WithDeadline(context.WithoutCancel(ctx), own.deadline)
}
