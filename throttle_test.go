package sluice

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestThrottle(t *testing.T) {
	start := time.Unix(1000, 0)
	tests := []struct {
		at     time.Duration // after start
		wantOK bool
		wantN  int
	}{
		{0, true, 1},
		{time.Second, false, 0},
		{9 * time.Second, false, 0},
		{10 * time.Second, true, 3},
		{15 * time.Second, false, 0},
		{25 * time.Second, true, 2},
	}
	th := &throttle{interval: 10 * time.Second}
	for i, tt := range tests {
		n, ok := th.tickAt(start.Add(tt.at))
		if ok != tt.wantOK || n != tt.wantN {
			t.Errorf("event %d at +%v: got (%d, %v), want (%d, %v)", i, tt.at, n, ok, tt.wantN, tt.wantOK)
		}
	}
}

// BenchmarkThrottleParallel is the rejection log's cost per rejection
// (logRejection, logDryRun) under a flood of one zone on every core: all
// but one line per interval held back. "now" reads the clock per event,
// as the log does; "fixed" leaves the clock out, to show the throttle's
// own cost.
func BenchmarkThrottleParallel(b *testing.B) {
	for _, clock := range []string{"now", "fixed"} {
		b.Run(clock, func(b *testing.B) {
			th := &throttle{interval: logInterval}
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					now := start
					if clock == "now" {
						now = time.Now()
					}
					th.tickAt(now)
				}
			})
		})
	}
}

// TestThrottleConcurrent: events counted on many goroutines at once, across
// several intervals, are each counted once: the lines' counts and the
// count the last line carries add up to every event.
func TestThrottleConcurrent(t *testing.T) {
	const workers, events = 8, 2000
	start := time.Unix(1000, 0)
	th := &throttle{interval: 10 * time.Millisecond}
	var logged atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range events {
				if n, ok := th.tickAt(start.Add(time.Duration(w+i) * 50 * time.Microsecond)); ok {
					logged.Add(int64(n))
				}
			}
		})
	}
	wg.Wait()
	n, ok := th.tickAt(start.Add(time.Hour)) // the last line: every event held back since
	if !ok {
		t.Fatal("an event an hour later: held back, want logged")
	}
	if got, want := logged.Load()+int64(n), int64(workers*events+1); got != want {
		t.Errorf("events counted: got %d, want %d", got, want)
	}
}
