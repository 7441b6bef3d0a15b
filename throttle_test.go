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
