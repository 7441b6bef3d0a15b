package algorithms

import "testing"

// TestSlotLen: a window's slots are window/SlidingWindowSlots rounded up to
// a µs, so whole milliseconds cut into whole µs and no window has more than
// SlidingWindowSlots+1 slots overlapping it.
func TestSlotLen(t *testing.T) {
	tests := []struct{ window, want int64 }{
		{1_000, 50},             // 1 ms
		{60_000_000, 3_000_000}, // 1 minute
		{1, 1},
		{21, 2},
		{40, 2},
	}
	for _, tt := range tests {
		got := slotLen(tt.window)
		if got != tt.want {
			t.Errorf("slotLen(%d): got %d, want %d", tt.window, got, tt.want)
		}
		if slots := (tt.window + got - 1) / got; slots > SlidingWindowSlots {
			t.Errorf("window %d: %d slots of %d, want at most %d", tt.window, slots, got, SlidingWindowSlots)
		}
	}
}
