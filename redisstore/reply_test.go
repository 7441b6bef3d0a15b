package redisstore

import (
	"testing"
	"time"
)

// TestDecisionsUnfoldRemaining: the decide code folds allowed into
// remaining (2 × remaining + allowed); decisions unfolds it for every
// sign, a debt's negative remaining included, up to 2^52; the next value
// is a denial's retry or an admission's delay.
func TestDecisionsUnfoldRemaining(t *testing.T) {
	tests := []struct {
		allowed   bool
		remaining int64
	}{
		{true, 0}, {false, 0}, {true, 41}, {false, 41},
		{false, -1}, {true, -3}, {false, -1 << 40}, {true, 1 << 51}, {false, 1<<52 - 1},
	}
	for _, tt := range tests {
		bit := int64(0)
		if tt.allowed {
			bit = 1
		}
		// what decide.lua computes: 2 * remaining + (ok and 1 or 0)
		v := []int64{2*tt.remaining + bit, 7, 8, 9}
		ds := decisions(v, 42)
		if len(ds) != 1 {
			t.Fatalf("decisions(%v): got %d, want 1", v, len(ds))
		}
		d := ds[0]
		if d.Allowed != tt.allowed || d.Remaining != tt.remaining {
			t.Errorf("decisions(%v): got allowed=%v remaining=%d, want %v, %d", v, d.Allowed, d.Remaining, tt.allowed, tt.remaining)
		}
		// the second value is a denial's retry, an admission's delay
		retry, delay := 7*time.Microsecond, time.Duration(0)
		if tt.allowed {
			retry, delay = 0, 7*time.Microsecond
		}
		if d.RetryAfter != retry || d.Delay != delay || d.ResetAfter != 8*time.Microsecond || d.MoreAfter != 9*time.Microsecond || d.At != 42 {
			t.Errorf("decisions(%v): got %+v, want retry %v, delay %v, reset 8µs, more 9µs, at 42", v, d, retry, delay)
		}
	}
}
