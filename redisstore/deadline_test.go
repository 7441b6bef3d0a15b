package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestWithTimeout: a WithTimeout context keeps the earlier of its
// parent's deadline and its own, ends with DeadlineExceeded at its
// deadline, and with Canceled when its parent is cancelled, also through
// the Done made on demand.
func TestWithTimeout(t *testing.T) {
	parent, cancelParent := context.WithTimeout(context.Background(), time.Hour)
	defer cancelParent()
	parentDeadline, _ := parent.Deadline()
	if d, ok := WithTimeout(parent, 2*time.Hour).Deadline(); !ok || !d.Equal(parentDeadline) {
		t.Errorf("deadline beyond the parent's: got %v, %v, want the parent's %v", d, ok, parentDeadline)
	}
	start := time.Now()
	ctx := WithTimeout(parent, 20*time.Millisecond)
	if d, _ := ctx.Deadline(); d.Before(start.Add(20*time.Millisecond)) || !d.Before(parentDeadline) {
		t.Errorf("deadline: got %v, want 20 ms after %v", d, start)
	}
	if err := ctx.Err(); err != nil {
		t.Fatalf("before the deadline: Err %v, want nil", err)
	}
	if v := ctx.Value(ctxKey{}); v != nil {
		t.Errorf("Value of a key never set: %v", v)
	}
	<-ctx.Done()
	if err := ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("after Done: Err %v, want DeadlineExceeded", err)
	}
	if elapsed := time.Since(start); elapsed < 20*time.Millisecond {
		t.Errorf("Done after %v, before the 20 ms deadline", elapsed)
	}

	inner, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	ctx = WithTimeout(inner, time.Hour)
	cancel()
	<-ctx.Done()
	if err := ctx.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("parent cancelled: Err %v, want Canceled", err)
	}
	if v := ctx.Value(ctxKey{}); v != "v" {
		t.Errorf("Value: got %v, want the parent's", v)
	}
}

type ctxKey struct{}

// TestSharedTimers: deadlines in one millisecond share a channel, which
// closes no earlier than the deadline and is then forgotten; a deadline
// already past gets a channel closed at once.
func TestSharedTimers(t *testing.T) {
	var timers sharedTimers
	deadline := time.Now().Add(30 * time.Millisecond)
	a := timers.at(deadline)
	ms := (deadline.Sub(timers.base) + time.Millisecond - 1) / time.Millisecond
	same := timers.base.Add(ms*time.Millisecond - 300*time.Microsecond) // in deadline's millisecond
	if timers.at(same) != a {
		t.Fatal("two deadlines in one millisecond: two timers")
	}
	if c := timers.at(deadline.Add(5 * time.Millisecond)); c == a {
		t.Fatal("deadlines 5 ms apart share a timer")
	}
	<-a
	if now := time.Now(); now.Before(deadline) {
		t.Errorf("closed at %v, before the deadline %v", now, deadline)
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		timers.mu.Lock()
		n := len(timers.chans)
		timers.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("%d timers left after their deadlines", n)
		}
	}
	select {
	case <-timers.at(time.Now().Add(-time.Second)):
	case <-time.After(10 * time.Second):
		t.Fatal("a deadline already past: its channel never closed")
	}
}

// TestSharedTimersWallDeadline: a deadline without a monotonic reading
// (read off the wall clock) falls in the millisecond of the same deadline
// with one, and shares its channel; the channel of a wall-clock deadline
// already past closes at once.
func TestSharedTimersWallDeadline(t *testing.T) {
	var timers sharedTimers
	deadline := time.Now().Add(time.Hour)
	timers.at(deadline) // sets base
	since, now := sinceBase(timers.base, deadline)
	if since != deadline.Sub(timers.base) || !now.IsZero() {
		t.Errorf("a deadline read on the clock: %v since base (clock read at %v), want %v and no reading", since, now, deadline.Sub(timers.base))
	}
	wall := deadline.Round(0)
	since, now = sinceBase(timers.base, wall)
	if diff := since - deadline.Sub(timers.base); now.IsZero() || diff < -time.Second || diff > time.Second {
		t.Errorf("a wall-clock deadline: %v since base (clock read at %v), want about %v and a reading", since, now, deadline.Sub(timers.base))
	}
	select {
	case <-timers.at(time.Now().Add(-time.Second).Round(0)):
	case <-time.After(10 * time.Second):
		t.Fatal("a wall-clock deadline already past: its channel never closed")
	}
}

// TestWithTimeoutErrStays: once a WithTimeout context has ended by its
// deadline, a parent cancelled later does not change its Err, and a Done
// asked for then is already closed.
func TestWithTimeoutErrStays(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	ctx := WithTimeout(parent, time.Millisecond)
	for end := time.Now().Add(10 * time.Second); ctx.Err() == nil; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("Err still nil 10 s after a 1 ms deadline")
		}
	}
	cancel()
	if err := ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("parent cancelled after the deadline: Err %v, want DeadlineExceeded still", err)
	}
	select {
	case <-ctx.Done():
	default:
		t.Error("Done made after the end: not closed")
	}
}

// TestQueuedWithTimeoutSeesClientLeave: a request queued under a
// WithTimeout context of an hour gives up with Canceled as soon as its
// parent, the client's request, is cancelled; and neither it nor a
// request decided normally makes the context's own Done (no timer per
// decision).
func TestQueuedWithTimeoutSeesClientLeave(t *testing.T) {
	release := make(chan struct{})
	b := &batcher{inFlight: 1}
	b.send = func(_ context.Context, batch []*pending, _ *early) {
		for _, p := range batch {
			if p.mode == "hold" {
				<-release
			}
			p.ds = []algorithms.Decision{{Allowed: true}}
		}
	}
	holding := signalSends(b)
	held := make(chan error, 1)
	go func() { held <- b.do(context.Background(), &pending{mode: "hold"}) }()
	waitSent(t, holding, "the held call")

	parent, cancel := context.WithCancel(context.Background())
	ctx := WithTimeout(parent, time.Hour)
	queued := make(chan error, 1)
	go func() { queued <- b.do(ctx, &pending{mode: modeConsume}) }()
	waitBatcher(t, b, "the request queued", func(b *batcher) bool { return len(b.queue) == 1 })
	cancel()
	select {
	case err := <-queued:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("client left while queued: got %v, want Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("client left while queued: still waiting 10 s later (its deadline is an hour away)")
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("held call: %v", err)
	}
	decided := WithTimeout(context.Background(), time.Hour)
	if err := b.do(decided, &pending{mode: modeConsume}); err != nil {
		t.Fatalf("a request decided normally: %v", err)
	}
	for name, c := range map[string]context.Context{"the cancelled request's": ctx, "the decided request's": decided} {
		if c.(*timeoutCtx).derived.Load() != nil {
			t.Errorf("%s context: its own Done was made, a timer per decision", name)
		}
	}
}

// TestLeaderAnswersByOwnDeadline: with Redis paused (SIGSTOP), a request
// that shares a batch with a peer of a much longer deadline answers with
// its own deadline's error, before the peer's deadline: it is not held
// until the latest deadline in its batch.
func TestLeaderAnswersByOwnDeadline(t *testing.T) {
	t.Run("context.WithTimeout", func(t *testing.T) { leaderAnswersByOwnDeadline(t, context.WithTimeout) })
	t.Run("WithTimeout", func(t *testing.T) { // the module's: a shared timer
		leaderAnswersByOwnDeadline(t, func(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
			return WithTimeout(ctx, d), func() {}
		})
	})
}

func leaderAnswersByOwnDeadline(t *testing.T, withTimeout func(context.Context, time.Duration) (context.Context, context.CancelFunc)) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	s := New(client, Options{InFlight: 1})
	if err := s.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 100, Window: time.Hour}
	reqs := []algorithms.Request{{Key: fmt.Sprint("deadline:", rand.Int64()), Limit: limit, Cost: 1}}
	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Signal(syscall.SIGCONT) })

	out := signalSends(s.batcher)
	// first holds the one call in flight until its 200 ms deadline ...
	firstCtx, cancelFirst := withTimeout(context.Background(), 200*time.Millisecond)
	defer cancelFirst()
	firstDone := make(chan error, 1)
	go func() { _, err := s.Allow(firstCtx, reqs); firstDone <- err }()
	waitSent(t, out, "first call")
	// ... while short (160 ms from its turn) and long (3 s) queue behind it
	shortCtx, cancelShort := withTimeout(context.Background(), 360*time.Millisecond)
	defer cancelShort()
	type result struct {
		err     error
		ownDone bool      // short's own ctx had ended when it returned
		at      time.Time // when it returned
	}
	shortDone := make(chan result, 1)
	go func() {
		_, err := s.Allow(shortCtx, reqs)
		shortDone <- result{err, shortCtx.Err() != nil, time.Now()}
	}()
	waitBatcher(t, s.batcher, "short queued", func(b *batcher) bool { return len(b.queue) == 1 })
	longCtx, cancelLong := withTimeout(context.Background(), 3*time.Second)
	defer cancelLong()
	longDeadline, _ := longCtx.Deadline()
	longDone := make(chan error, 1)
	go func() { _, err := s.Allow(longCtx, reqs); longDone <- err }()
	waitBatcher(t, s.batcher, "long queued", func(b *batcher) bool { return len(b.queue) == 2 })

	if err := <-firstDone; err == nil {
		t.Fatal("first: got no error from a paused Redis, want one")
	}
	got := <-shortDone // short and long now share a call, sent by long
	if !errors.Is(got.err, context.DeadlineExceeded) || !got.ownDone {
		t.Errorf("short: got %v (own deadline passed: %v), want its own deadline's error", got.err, got.ownDone)
	}
	if !got.at.Before(longDeadline) {
		t.Errorf("short returned at %v, after its peer's deadline %v: held for the batch", got.at, longDeadline)
	}
	// Redis goes on: the long request's call completes and decides it
	if err := srv.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := <-longDone; err != nil {
		t.Errorf("long: got %v, want decided once Redis resumed", err)
	}
	if _, err := s.Allow(context.Background(), reqs); err != nil {
		t.Errorf("after: got %v, want decided", err)
	}
}
