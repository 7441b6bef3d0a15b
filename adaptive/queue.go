package adaptive

import (
	"container/list"
	"context"
	"time"
)

// Ticket is a request's place in a limiter's queue (max_delay): Ready is
// closed when it is granted a slot. Its owner waits on Ready for Wait,
// and on its context, and calls Leave when it stops waiting for any
// other reason than Ready.
type Ticket struct {
	class   int
	wait    time.Duration
	ready   chan struct{}
	granted bool
	slot    Slot
	elem    *list.Element
}

// Ready is closed once the ticket holds a slot.
func (t *Ticket) Ready() <-chan struct{} { return t.ready }

// Wait is how long the ticket's owner waits for a slot: its max_delay,
// or less under a standing queue (Limiter.EnqueueAt).
func (t *Ticket) Wait() time.Duration { return t.wait }

// queue holds the tickets waiting for a slot: one FIFO per class, served
// best class first.
type queue struct {
	classes []classQueue
	n       int
}

// classQueue is one class's FIFO, and whether it stands: a class served
// first (critical requests under a load the others make) seldom waits
// long, and keeps its whole max_delay when it does.
type classQueue struct {
	list.List
	busy  time.Time // since when it has not been empty; zero while it is
	stood time.Time // when it was last seen standing
	// overloaded is when a request last joined it while it stood and
	// found no slot: its class wants more than the limit gives it
	overloaded time.Time
}

func newQueue(classes int) queue {
	return queue{classes: make([]classQueue, max(classes, 1))}
}

func (q *queue) push(now time.Time, class int, wait time.Duration) *Ticket {
	t := &Ticket{class: class, wait: wait, ready: make(chan struct{})}
	c := &q.classes[class]
	if c.Len() == 0 {
		c.busy = now
	}
	t.elem = c.PushBack(t)
	q.n++
	return t
}

// standing reports whether class's queue holds overload at now, not a
// burst: it has not been empty for after, or was so within standingHold
// (under overload short waits empty it now and then: a request joining
// it then is no burst's). A request that finds it standing and not
// empty keeps it standing: under overload its short waits may never
// again leave it non-empty for after, and a request admitted with its
// whole max_delay then would be served before those that joined after
// it (at 10× in the drill such seconds had a p99 25–30 ms over the
// upstream's).
func (q *queue) standing(now time.Time, class int, after time.Duration) bool {
	c := &q.classes[class]
	recent := !c.stood.IsZero() && now.Sub(c.stood) < standingHold
	if c.Len() > 0 && (recent || now.Sub(c.busy) >= after) {
		c.stood = now
	}
	return recent || c.stood.Equal(now)
}

// yieldEnd is when class stops yielding to the better classes: yieldFor
// after the last overloaded moment of any of them (zero if none was).
func (q *queue) yieldEnd(class int, yieldFor time.Duration) time.Time {
	var end time.Time
	for c := range min(class, len(q.classes)) {
		if o := q.classes[c].overloaded; !o.IsZero() && o.Add(yieldFor).After(end) {
			end = o.Add(yieldFor)
		}
	}
	return end
}

// bestWaiting is the best class with a ticket waiting, if any.
func (q *queue) bestWaiting() (class int, ok bool) {
	for c := range q.classes {
		if q.classes[c].Len() > 0 {
			return c, true
		}
	}
	return 0, false
}

// remove takes a waiting ticket out of the queue.
func (q *queue) remove(t *Ticket) {
	if t.elem != nil {
		c := &q.classes[t.class]
		c.Remove(t.elem)
		t.elem = nil
		q.n--
		if c.Len() == 0 {
			c.busy = time.Time{}
		}
	}
}

// waitingUpTo reports whether a ticket of class or a better one waits: a
// new request of class may not pass it.
func (q *queue) waitingUpTo(class int) bool {
	c, ok := q.bestWaiting()
	return ok && c <= class
}

// serve grants the tickets that fit, best class first, FIFO within a
// class: fits says whether class may take a slot now, grant gives it one.
// Shares never grow with the class, so once the best waiting class does
// not fit, no later one does.
func (q *queue) serve(fits func(class int) bool, grant func(t *Ticket)) {
	for c := range q.classes {
		l := &q.classes[c]
		for l.Len() > 0 {
			if !fits(c) {
				return
			}
			t := l.Front().Value.(*Ticket)
			q.remove(t)
			t.granted = true
			grant(t)
			close(t.ready)
		}
	}
}

// Wait waits up to maxDelay (less under a standing queue: EnqueueAt) for
// a slot for class: ok when it got one, left when ctx ended first (its
// client left).
func (l *Limiter) Wait(ctx context.Context, class int, maxDelay time.Duration) (s Slot, ok, left bool) {
	t := l.EnqueueAt(time.Now(), class, maxDelay)
	if t == nil {
		return s, false, false
	}
	timer := time.NewTimer(t.Wait())
	defer timer.Stop()
	select {
	case <-t.Ready():
		return t.Slot(), true, false
	case <-timer.C:
	case <-ctx.Done():
		left = true
	}
	if l.Leave(t) { // granted as it gave up
		if left {
			l.CancelAt(time.Now(), t.Slot())
			return s, false, true
		}
		return t.Slot(), true, false
	}
	return s, false, left
}
