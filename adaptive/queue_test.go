package adaptive

import (
	"context"
	"runtime"
	"testing"
	"time"
)

func ready(t *Ticket) bool {
	select {
	case <-t.Ready():
		return true
	default:
		return false
	}
}

func TestQueueBestClassFirstFIFOWithin(t *testing.T) {
	// limit 2, three classes, reserve 0: every class may use both slots
	l := newTest(Config{Min: 1, Max: 10, Initial: 2, Classes: 3})
	a, _ := l.AcquireAt(t0, 0)
	b, _ := l.AcquireAt(t0, 0)
	bulk1 := l.EnqueueAt(t0, 2, time.Second)
	normal1 := l.EnqueueAt(t0, 1, time.Second)
	bulk2 := l.EnqueueAt(t0, 2, time.Second)
	normal2 := l.EnqueueAt(t0, 1, time.Second)
	critical := l.EnqueueAt(t0, 0, time.Second)
	order := []*Ticket{critical, normal1, normal2, bulk1, bulk2}
	names := []string{"critical", "normal 1", "normal 2", "bulk 1", "bulk 2"}
	if s := l.StateAt(t0); s.Waiting != 5 {
		t.Fatalf("waiting = %d, want 5", s.Waiting)
	}
	held := []Slot{a, b}
	for i, tk := range order {
		if ready(tk) {
			t.Fatalf("%s ready before a slot was released", names[i])
		}
		l.ReleaseAt(t0, held[0], ms, Answered)
		held = held[1:]
		for j, other := range order {
			if got := ready(other); got != (j <= i) {
				t.Fatalf("after %d releases: %s ready = %v, want %v", i+1, names[j], got, j <= i)
			}
		}
		held = append(held, tk.Slot())
	}
}

func TestQueueNewRequestDoesNotPassWaiters(t *testing.T) {
	l := newTest(Config{Min: 1, Max: 10, Initial: 1, Classes: 2})
	s, _ := l.AcquireAt(t0, 0)
	tk := l.EnqueueAt(t0, 1, time.Second)
	l.CancelAt(t0, s)
	if !ready(tk) {
		t.Fatal("waiting ticket not granted the freed slot")
	}
	if _, ok := l.AcquireAt(t0, 1); ok {
		t.Error("new bulk request admitted over the limit")
	}
	l2 := newTest(Config{Min: 1, Max: 10, Initial: 1, Classes: 2})
	s2, _ := l2.AcquireAt(t0, 0)
	l2.EnqueueAt(t0, 0, time.Second)
	// the slot is still held: a new critical request must queue behind the waiting one
	l2.CancelAt(t0, s2)
	if _, ok := l2.AcquireAt(t0, 0); ok {
		t.Error("new request took the slot a waiting one of its class was granted")
	}
}

func TestQueueLeave(t *testing.T) {
	l := newTest(Config{Min: 1, Max: 10, Initial: 1})
	s, _ := l.AcquireAt(t0, 0)
	gone := l.EnqueueAt(t0, 0, time.Second)
	next := l.EnqueueAt(t0, 0, time.Second)
	if l.Leave(gone) {
		t.Fatal("Leave of a waiting ticket says it was granted")
	}
	l.ReleaseAt(t0, s, ms, Answered)
	if ready(gone) {
		t.Error("a ticket that left was granted")
	}
	if !ready(next) {
		t.Fatal("the ticket behind the one that left was not granted")
	}
	if !l.Leave(next) {
		t.Error("Leave of a granted ticket: want true, the caller holds its slot")
	}
	if st := l.StateAt(t0); st.InFlight != 1 || st.Waiting != 0 {
		t.Errorf("state %+v, want 1 in flight, none waiting", st)
	}
}

func TestQueueFullAndGrantedAtOnce(t *testing.T) {
	l := newTest(Config{Min: 1, Max: 10, Initial: 1, MaxQueue: 1})
	if tk := l.EnqueueAt(t0, 0, time.Second); tk == nil || !ready(tk) {
		t.Fatal("a ticket with a slot free: want it ready at once")
	}
	if l.EnqueueAt(t0, 0, time.Second) == nil {
		t.Fatal("first waiting ticket refused")
	}
	if l.EnqueueAt(t0, 0, time.Second) != nil {
		t.Error("ticket past MaxQueue accepted")
	}
}

func TestQueueServedWhenTheLimitGrows(t *testing.T) {
	l := newTest(Config{Min: 1, Max: 100, Initial: 2})
	c := &clock{t0}
	for range 3 {
		round(t, l, c, 20, 1, 10*ms, Answered)
	}
	// an interval at the limit with 20 samples, then two wait
	var held []Slot
	for range 20 {
		s, _ := l.AcquireAt(c.now, 0)
		s2, _ := l.AcquireAt(c.now, 0)
		l.ReleaseAt(c.now, s, 10*ms, Answered)
		l.ReleaseAt(c.now, s2, 10*ms, Answered)
	}
	for range 2 {
		s, _ := l.AcquireAt(c.now, 0)
		held = append(held, s)
	}
	tk := l.EnqueueAt(c.now, 0, time.Second)
	c.add(1100 * ms)
	if st := l.StateAt(c.now); st.Limit <= 2 {
		t.Fatalf("limit = %d, want it grown", st.Limit)
	}
	if !ready(tk) {
		t.Error("waiting ticket not granted when the limit grew")
	}
	_ = held
}

// fullAt40ms is a limiter of cfg, whose limit is 2, with a baseline of
// 40 ms and both its slots held, and its clock.
func fullAt40ms(t *testing.T, cfg Config) (*Limiter, *clock) {
	t.Helper()
	l, c := atBaseline(t, cfg, 1, 40*ms)
	if b := l.StateAt(c.now).Baseline; b != 40*ms {
		t.Fatalf("baseline %v, want 40ms", b)
	}
	l.AcquireAt(c.now, 0)
	l.AcquireAt(c.now, 0)
	return l, c
}

// TestStandingQueueWaitsLess: a request queued behind a burst waits its
// max_delay; once the queue has not been empty for standingAfter (the
// baseline), a new
// one waits at most an eighth of the baseline (so that, under overload, admitted
// requests have not all waited max_delay; those already waiting keep
// their time), and still for standingHold after it was last standing,
// empty or not; then max_delay again.
func TestStandingQueueWaitsLess(t *testing.T) {
	l, c := fullAt40ms(t, Config{Min: 1, Max: 2, Initial: 2})
	maxDelay := 500 * ms
	var waiting []*Ticket
	enqueue := func(maxDelay, want time.Duration, why string) {
		t.Helper()
		tk := l.EnqueueAt(c.now, 0, maxDelay)
		if tk.Wait() != want {
			t.Errorf("%s: waits %v, want %v", why, tk.Wait(), want)
		}
		waiting = append(waiting, tk)
	}
	enqueue(maxDelay, maxDelay, "first in the queue")
	if after := l.standingAfter(); after != 40*ms {
		t.Fatalf("standing after %v, want the baseline, 40ms", after)
	}
	c.add(40*ms - ms)
	enqueue(maxDelay, maxDelay, "queue not empty for less than standingAfter")
	c.add(ms)
	enqueue(maxDelay, 5*ms, "standing queue: an eighth of the baseline")
	if first := waiting[0]; ready(first) {
		t.Error("the ticket waiting since before the queue stood did not keep its time")
	}
	enqueue(3*ms, 3*ms, "standing queue, max_delay shorter")
	for _, tk := range waiting {
		if l.Leave(tk) {
			t.Fatal("a ticket was granted a slot with none free")
		}
	}
	c.add(ms)
	enqueue(maxDelay, 5*ms, "the queue emptied, within standingHold: still overload")
	if l.Leave(waiting[len(waiting)-1]) {
		t.Fatal("a ticket was granted a slot with none free")
	}
	c.add(standingHold)
	enqueue(maxDelay, maxDelay, "the queue empty for standingHold: a burst again")
}

// TestStandingQueueIsPerClass: while the second class's queue stands,
// a request of the first class, served first, still waits its max_delay;
// once the first class's own queue has not been empty for standingAfter,
// it waits an eighth of the baseline too.
func TestStandingQueueIsPerClass(t *testing.T) {
	l, c := fullAt40ms(t, Config{Min: 1, Max: 2, Initial: 2, Classes: 2, Reserve: 0.5})
	maxDelay := 500 * ms
	wait := func(class int) time.Duration { return l.EnqueueAt(c.now, class, maxDelay).Wait() }
	wait(1)
	c.add(40 * ms)
	if w := wait(1); w != 5*ms {
		t.Fatalf("second class, its queue standing: waits %v, want 5ms", w)
	}
	if w := wait(0); w != maxDelay {
		t.Errorf("first class, only the second's queue standing: waits %v, want its max_delay", w)
	}
	c.add(40 * ms)
	if w := wait(0); w != 5*ms {
		t.Errorf("first class, its own queue standing: waits %v, want 5ms", w)
	}
}

// TestStandingAfterFollowsBaseline: a queue stands after one baseline,
// no sooner than minStandingAfter (a fast upstream's bursts) and no later
// than maxStandingAfter.
func TestStandingAfterFollowsBaseline(t *testing.T) {
	for _, tt := range []struct{ baseline, want time.Duration }{
		{ms, minStandingAfter},
		{30 * ms, 30 * ms},
		{time.Second, maxStandingAfter},
	} {
		l := newTest(Config{Min: 1, Max: 2, Initial: 2})
		l.base.value = tt.baseline
		if got := l.standingAfter(); got != tt.want {
			t.Errorf("baseline %v: standing after %v, want %v", tt.baseline, got, tt.want)
		}
	}
}

func TestWaitGetsAFreedSlotOrLeavesWithItsClient(t *testing.T) {
	now := time.Now()
	l := New(Config{Min: 1, Max: 10, Initial: 1, Rand: noJitter}, now)
	held, _ := l.AcquireAt(now, 0)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok, left := l.Wait(ctx, 0, time.Minute); ok || !left {
		t.Fatalf("client gone: Wait ok=%v left=%v, want a leave", ok, left)
	}
	if s := l.StateAt(time.Now()); s.InFlight != 1 || s.Waiting != 0 {
		t.Fatalf("after a leave: in flight %d, waiting %d; want 1, 0", s.InFlight, s.Waiting)
	}

	got := make(chan bool)
	go func() {
		_, ok, _ := l.Wait(context.Background(), 0, time.Minute)
		got <- ok
	}()
	for l.StateAt(time.Now()).Waiting == 0 { // until it queues
		runtime.Gosched()
	}
	l.ReleaseAt(time.Now(), held, time.Millisecond, Answered)
	if !<-got {
		t.Fatal("Wait did not get the slot released while it waited")
	}
	if s := l.StateAt(time.Now()); s.InFlight != 1 {
		t.Fatalf("in flight %d after the hand-over, want 1", s.InFlight)
	}
}

// TestWorseClassYields: once a request has joined the first class's
// standing queue and found no slot, the second class takes no slot
// within its share for yieldFor, though the first class's queue is empty
// for the moment (its next requests are on their way); after that, an
// answer serves the second class's waiting ticket.
func TestWorseClassYields(t *testing.T) {
	l, c := atBaseline(t, Config{Min: 1, Max: 10, Initial: 10, Classes: 2, Reserve: 0.2}, 1, 200*ms) // shares 10 and 8; yieldFor 100 ms
	l.after = func(time.Duration, func()) {}                                                         // the clock is c, not the real one
	var held []Slot
	for range 10 {
		s, ok := l.AcquireAt(c.now, 0)
		if !ok {
			t.Fatal("first class refused a slot of an idle limiter")
		}
		held = append(held, s)
	}
	release := func(n int) {
		for range n {
			l.ReleaseAt(c.now, held[0], 200*ms, Answered)
			held = held[1:]
		}
	}
	first := l.EnqueueAt(c.now, 0, time.Second)
	c.add(l.standingAfter())
	if overloaded := l.EnqueueAt(c.now, 0, time.Second); overloaded.Wait() != 25*ms {
		t.Fatalf("the first class's queue did not stand after standingAfter: waits %v", overloaded.Wait())
	}
	release(6) // two serve the first class's queue: 6 in flight, the second class's share 8
	if !ready(first) || l.StateAt(c.now).Waiting != 0 {
		t.Fatal("the first class's tickets were not served")
	}
	if _, ok := l.AcquireAt(c.now, 1); ok {
		t.Error("second class admitted a moment after a request found no slot in the first class's standing queue")
	}
	bulk := l.EnqueueAt(c.now, 1, time.Second)
	if ready(bulk) {
		t.Error("second class's ticket served a moment after a request found no slot in the first class's standing queue")
	}
	if s, ok := l.AcquireAt(c.now, 0); !ok {
		t.Error("first class refused a slot within its share")
	} else {
		held = append(held, s)
	}
	c.add(l.yieldFor())
	release(1)
	if !ready(bulk) {
		t.Error("yieldFor later, an answer did not serve the second class's ticket")
	}
}

// TestYieldEndsWithoutAnAnswer: tickets of a class that yields, with
// room in its share, are all served when the yield ends, though nothing
// is in flight by then and no answer comes.
func TestYieldEndsWithoutAnAnswer(t *testing.T) {
	l, c := atBaseline(t, Config{Min: 1, Max: 10, Initial: 4, Classes: 2, Reserve: 0.2}, 1, 40*ms) // shares 4 and 3; yieldFor 40 ms
	var wake func()
	var wakeIn time.Duration
	l.after = func(d time.Duration, f func()) { wakeIn, wake = d, f }
	var held []Slot
	for range 4 {
		s, _ := l.AcquireAt(c.now, 0)
		held = append(held, s)
	}
	first := l.EnqueueAt(c.now, 0, time.Second)
	c.add(l.standingAfter())
	second := l.EnqueueAt(c.now, 0, time.Second) // joins the standing queue, finds no slot
	var bulk []*Ticket
	for range 3 {
		bulk = append(bulk, l.EnqueueAt(c.now, 1, time.Second))
	}
	for _, s := range held { // serves first and second, then frees two slots
		l.ReleaseAt(c.now, s, 40*ms, Answered)
	}
	for _, tk := range []*Ticket{first, second} {
		<-tk.Ready()
		l.ReleaseAt(c.now, tk.Slot(), 40*ms, Answered) // nothing in flight now
	}
	for i, tk := range bulk {
		if ready(tk) {
			t.Fatalf("second class's ticket %d served while its class yields", i)
		}
	}
	if wake == nil || wakeIn != l.yieldFor() {
		t.Fatalf("no wake when the yield ends (in %v), want one in yieldFor, %v", wakeIn, l.yieldFor())
	}
	wake() // on the real clock: after the yield's end on the tests' clock
	for i, tk := range bulk {
		if !ready(tk) {
			t.Fatalf("second class's ticket %d not served when its class stopped yielding", i)
		}
	}
	if s := l.StateAt(c.now); s.InFlight != 3 || s.Waiting != 0 {
		t.Errorf("in flight %d, waiting %d; want the three tickets in flight", s.InFlight, s.Waiting)
	}
}

// TestStandingQueueStaysWhileJoined: a standing queue that empties now
// and then (its requests' short waits) stays standing past standingHold
// while requests keep finding it not empty, though it never again stays
// not empty for standingAfter; once empty for standingHold, it is a
// burst's again.
func TestStandingQueueStaysWhileJoined(t *testing.T) {
	l, c := fullAt40ms(t, Config{Min: 1, Max: 2, Initial: 2})
	maxDelay := 500 * ms
	enqueue := func(want time.Duration, why string) *Ticket {
		t.Helper()
		tk := l.EnqueueAt(c.now, 0, maxDelay)
		if tk.Wait() != want {
			t.Fatalf("%s: waits %v, want %v", why, tk.Wait(), want)
		}
		return tk
	}
	first := enqueue(maxDelay, "first in the queue")
	c.add(40 * ms)
	l.Leave(enqueue(5*ms, "the queue stood a baseline"))
	l.Leave(first)
	for range 4 { // 2 s, twice standingHold
		c.add(standingHold / 2)
		alone := enqueue(5*ms, "joining the empty queue, within standingHold")
		c.add(ms)
		l.Leave(enqueue(5*ms, "joining it not empty"))
		l.Leave(alone)
	}
	c.add(standingHold)
	enqueue(maxDelay, "the queue empty for standingHold: a burst again")
}
