package algorithms_test

import (
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// TestFixedWindowMemory: on the memory store, a window admits its events,
// then denies until the window's end, when everything comes back at once;
// a settlement for a window that has passed changes nothing.
func TestFixedWindowMemory(t *testing.T) {
	m := algorithms.NewMemoryStore()
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 3, Window: time.Minute}
	req := []algorithms.Request{{Key: "fw", Limit: limit, Cost: 1}}
	first := m.AllowAt(t0, req)[0]
	for i := 1; i < 3; i++ {
		if d := m.AllowAt(t0.Add(time.Duration(i)*time.Second), req)[0]; !d.Allowed {
			t.Fatalf("request %d denied", i+1)
		}
	}
	d := m.AllowAt(t0.Add(20*time.Second), req)[0]
	if d.Allowed || d.RetryAfter != 40*time.Second || d.MoreAfter != 40*time.Second {
		t.Errorf("4th request: got %+v, want denied with RetryAfter and MoreAfter 40s", d)
	}
	next := t0.Add(time.Minute)
	if d := m.PeekAt(next, req)[0]; !d.Allowed || d.Remaining != 3 {
		t.Errorf("next window: got %+v, want allowed with remaining 3", d)
	}
	m.AllowAt(next, req)
	m.SettleAt(next, []algorithms.Settlement{{Key: "fw", Limit: limit, At: first.At, Delta: -1}})
	if d := m.PeekAt(next, req)[0]; d.Remaining != 2 {
		t.Errorf("after a refund for the last window: got remaining %d, want 2", d.Remaining)
	}
}
