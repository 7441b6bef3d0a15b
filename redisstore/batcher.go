package redisstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// Batch bounds. A call decides at most maxBatchRequests requests and
// maxBatchKeys zone keys, since one call blocks Redis while it runs, and
// at most DefaultInFlight calls of one store are in flight at once.
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

	deadline    time.Time // the caller's, if hasDeadline
	hasDeadline bool

	ds  []algorithms.Decision
	err error

	done  chan struct{} // one signal: decided, or lead batch
	state pendingState  // guarded by batcher.mu
	batch []*pending    // when state is leading: the batch to send
}

type pendingState uint8

const (
	queued  pendingState = iota // in batcher.queue
	sent                        // taken into a batch someone else sends
	leading                     // taken, and this caller sends the batch
)

// batcher lets concurrent requests of one store share calls: an idle store
// sends a request at once, alone (no added latency); while inFlight calls
// are out, requests queue, and each call that returns hands everything
// queued (up to the batch bounds) to one of the queued callers, which sends
// it as the next call. The caller that sends a call waits for it no longer
// than its own deadline: when others in the batch may wait longer, the
// call goes on in a goroutine of its own (see lead).
type batcher struct {
	send     func(ctx context.Context, batch []*pending) // fills ds, err
	inFlight int

	mu      sync.Mutex
	queue   []*pending
	running int // calls out
}

// do decides p, in a call of its own or of a batch. When ctx ends while p
// waits, do returns ctx.Err() at once; p may still be decided (and consume)
// in a call already sent. A caller chosen to send a batch sends it even if
// its ctx ends meanwhile, since the others in the batch wait on it, but
// returns by its own deadline.
func (b *batcher) do(ctx context.Context, p *pending) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.deadline, p.hasDeadline = ctx.Deadline()
	b.mu.Lock()
	if b.running < b.inFlight {
		b.running++
		b.mu.Unlock()
		return b.lead(ctx, []*pending{p})
	}
	p.done = make(chan struct{}, 1)
	p.state = queued
	b.queue = append(b.queue, p)
	b.mu.Unlock()
	select {
	case <-p.done:
	case <-ctx.Done():
		if b.abandon(p) {
			return ctx.Err() // p's fields may still be written by a sender
		}
		<-p.done
	}
	if p.state == leading { // written before the signal
		return b.lead(ctx, p.batch)
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

// lead sends batch (batch[0] is the caller's own request) and returns the
// caller's error. The call runs until the latest deadline in the batch
// (batchContext); when that is later than the caller's own, the call runs
// in a goroutine of its own and the caller waits for it only until its ctx
// ends, then returns ctx.Err() (its decision, if one comes, is dropped, as
// for any caller that gives up). The wait belongs to the call, not to the
// caller who happened to send it.
func (b *batcher) lead(ctx context.Context, batch []*pending) error {
	own := batch[0]
	if !outlives(batch) {
		b.call(ctx, batch)
		return own.err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.call(ctx, batch)
	}()
	select {
	case <-done:
		return own.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// outlives reports whether some request of batch may wait longer than its
// first (a later deadline, or none while the first has one).
func outlives(batch []*pending) bool {
	first := batch[0]
	if !first.hasDeadline {
		return false
	}
	for _, p := range batch[1:] {
		if !p.hasDeadline || p.deadline.After(first.deadline) {
			return true
		}
	}
	return false
}

// call sends batch, then, whatever happens in send (a panic too), hands the
// next batch, if any queued, to its first caller, and wakes the others. A
// panic in send fails every request of the batch with an error instead of
// going on up: the call may run in a goroutine no handler recovers, and a
// store that stopped handing on would leave every later decision waiting
// out its timeout.
func (b *batcher) call(ctx context.Context, batch []*pending) {
	defer b.finish(batch)
	defer func() {
		if r := recover(); r != nil {
			err := fmt.Errorf("deciding a batch of %d: panic: %v", len(batch), r)
			for _, p := range batch {
				p.err = err
			}
		}
	}()
	callCtx, cancel := batchContext(ctx, batch)
	defer cancel()
	b.send(callCtx, batch)
}

// finish hands on the next batch, or gives back batch's place in flight,
// and wakes batch's callers but the first.
func (b *batcher) finish(batch []*pending) {
	b.mu.Lock()
	next := b.take()
	if next == nil {
		b.running--
	}
	b.mu.Unlock()
	if next != nil {
		next[0].done <- struct{}{}
	}
	for _, p := range batch[1:] {
		p.done <- struct{}{}
	}
}

// take removes the next batch from the queue and marks it; b.mu is held.
func (b *batcher) take() []*pending {
	n, keys := 0, 0
	for n < len(b.queue) && n < maxBatchRequests {
		keys += len(b.queue[n].reqs) + len(b.queue[n].ss)
		if n > 0 && keys > maxBatchKeys {
			break
		}
		n++
	}
	if n == 0 {
		return nil
	}
	batch := slices.Clone(b.queue[:n])
	b.queue = slices.Delete(b.queue, 0, n)
	for _, p := range batch {
		p.state = sent
	}
	batch[0].state, batch[0].batch = leading, batch
	return batch
}

// batchContext is the context a batch's call runs under: not cancelled
// with the leader's (one client going away must not fail the others), and
// bounded by the latest deadline in the batch, or none if one has none.
func batchContext(ctx context.Context, batch []*pending) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, p := range batch {
		if !p.hasDeadline {
			return context.WithoutCancel(ctx), func() {}
		}
		if p.deadline.After(latest) {
			latest = p.deadline
		}
	}
	return context.WithDeadline(context.WithoutCancel(ctx), latest)
}
