package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// WithTimeout returns ctx bounded by timeout, as context.WithTimeout does,
// for a decision by a Store, without a timer of its own and with nothing
// to cancel: the store's batcher waits for the deadline on a timer shared
// by the requests whose deadlines fall in the same millisecond, so a busy
// store starts a timer a millisecond rather than one a request, and a
// deadline may pass up to a millisecond late. Done, when something else
// asks for it, is that of a context.WithDeadline made then.
func WithTimeout(ctx context.Context, timeout time.Duration) context.Context {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	return &timeoutCtx{Context: ctx, deadline: deadline}
}

// timeoutCtx is WithTimeout's context. Its Err is the parent's, else
// DeadlineExceeded once the clock passes the deadline, and once not nil it
// stays what it first was; after Done is made, it is Done's.
type timeoutCtx struct {
	context.Context // the parent
	deadline        time.Time
	err             atomic.Pointer[error] // the first non-nil Err

	once    sync.Once
	derived atomic.Pointer[context.Context] // made by Done, unless already ended
	done    <-chan struct{}
	// cancel is never called: the timer ends the derived context at the
	// deadline
	cancel context.CancelFunc
}

func (c *timeoutCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *timeoutCtx) Done() <-chan struct{} {
	c.once.Do(func() {
		if c.Err() != nil {
			ended := make(chan struct{})
			close(ended)
			c.done = ended
			return
		}
		ctx, cancel := context.WithDeadline(c.Context, c.deadline)
		c.cancel, c.done = cancel, ctx.Done()
		c.derived.Store(&ctx)
	})
	return c.done
}

func (c *timeoutCtx) Err() error {
	if err := c.err.Load(); err != nil {
		return *err
	}
	var err error
	if d := c.derived.Load(); d != nil {
		err = (*d).Err()
	} else if err = c.Context.Err(); err == nil && !time.Now().Before(c.deadline) {
		err = context.DeadlineExceeded
	}
	if err == nil {
		return nil
	}
	first := err // on the heap only once the context has ended
	c.err.CompareAndSwap(nil, &first)
	return *c.err.Load()
}

// waitOn is what a request waiting under ctx watches besides its answer:
// ctx's end, and, for a WithTimeout context, its parent's end and its
// deadline on a shared timer.
func (t *sharedTimers) waitOn(ctx context.Context) (ended, expired <-chan struct{}) {
	if c, ok := ctx.(*timeoutCtx); ok {
		return c.Context.Done(), t.at(c.deadline)
	}
	return ctx.Done(), nil
}

// sharedTimers closes one channel a millisecond of deadline, for every
// request of a store whose deadline falls in it. The zero value is ready.
type sharedTimers struct {
	mu    sync.Mutex
	base  time.Time               // the first use, a monotonic origin
	chans map[int64]chan struct{} // by deadline in ms after base, rounded up
}

// at returns a channel closed at deadline, or up to a millisecond after.
func (t *sharedTimers) at(deadline time.Time) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.chans == nil {
		t.base, t.chans = time.Now(), make(map[int64]chan struct{})
	}
	since, now := sinceBase(t.base, deadline)
	ms := int64((since + time.Millisecond - 1) / time.Millisecond)
	c, ok := t.chans[ms]
	if !ok {
		if now.IsZero() {
			now = time.Now()
		}
		c = make(chan struct{})
		t.chans[ms] = c
		time.AfterFunc(t.base.Add(time.Duration(ms)*time.Millisecond).Sub(now), func() {
			t.mu.Lock()
			delete(t.chans, ms)
			t.mu.Unlock()
			close(c)
		})
	}
	return c
}

// sinceBase is how long after base deadline falls on the monotonic clock.
// A deadline with a monotonic reading (WithTimeout's, from time.Now) is
// read against base alone; one without (a wall-clock deadline) is the
// time since base now, plus what is left now, and then now is returned
// too (else the zero time): so a deadline read on the clock already costs
// no reading of it, the other is still right.
func sinceBase(base, deadline time.Time) (time.Duration, time.Time) {
	if deadline != deadline.Round(0) { // Round(0) strips the monotonic reading: deadline has one
		return deadline.Sub(base), time.Time{}
	}
	now := time.Now()
	return now.Sub(base) + deadline.Sub(now), now
}
