package sluice

import (
	"fmt"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// TestWaitSweepAgain: the entries made while a sweep runs, whose triggers
// found it running, are swept once it ends, not left until a later
// trigger: the map holds about sweepEvery idle entries at most. The sweep
// is made long by many keys that hold places (a sweep keeps them); which
// entries it visits depends on timing, so the test runs a few times.
func TestWaitSweepAgain(t *testing.T) {
	for attempt := range 20 {
		left, made := idleLeftAfterSweeps(t)
		if left > sweepEvery {
			t.Fatalf("attempt %d: idle entries left after the sweeps: got %d of %d made, want at most %d",
				attempt, left, made, sweepEvery)
		}
	}
}

// idleLeftAfterSweeps makes 4 × sweepEvery idle entries while a long
// sweep runs, none after, and returns how many are left once no sweep
// runs, and how many were made in all.
func idleLeftAfterSweeps(t *testing.T) (left, made int) {
	t.Helper()
	w := newWaiting([]*Zone{{MaxDelay: caddy.Duration(time.Second)}}, false, zap.NewNop())
	for i := range 100 * sweepEvery {
		if _, ok := w.enterKey(fmt.Sprint("held-", i)); !ok {
			t.Fatalf("held key %d: no place", i)
		}
	}
	waitSwept(t, w)
	during := 0 // made while the sweep ran
	for started := false; made < 100*sweepEvery && during < 4*sweepEvery; made++ {
		running := w.sweeping.Load()
		if started && !running {
			break // made until the sweep ended, none after
		}
		started = started || running
		if running {
			during++
		}
		k, _ := w.enterKey(fmt.Sprint("idle-", made))
		w.leaveKey(k)
	}
	waitSwept(t, w)
	w.byKey.Range(func(_, v any) bool {
		if v.(*keyPlaces).n.Load() == 0 {
			left++
		}
		return true
	})
	return left, made
}

// waitSwept waits until no sweep of w runs.
func waitSwept(t *testing.T, w *waiting) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); w.sweeping.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a sweep never ended")
		}
	}
}
