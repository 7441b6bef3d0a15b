package sluice

import (
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
