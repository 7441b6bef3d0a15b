package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"
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
