package algorithms

import (
	"context"
	"testing"
	"time"
)

// TestMemoryBans: a trip bans for the request's ban on the store's clock,
// later decisions are banned with the remaining time, the ban ends by
// itself, Reset lifts it, and the bans held stay within the bound.
func TestMemoryBans(t *testing.T) {
	m := NewMemoryStoreOf(4)
	t0 := time.Unix(1_800_000_000, 0)
	req := []Request{{Key: "k", Limit: Limit{Algorithm: FixedWindow, Events: 1, Window: time.Hour}, Cost: 1, BanSeconds: 60}}
	if ds := m.AllowAt(t0, req); !ds[0].Allowed {
		t.Fatalf("first: %+v", ds[0])
	}
	if ds := m.AllowAt(t0, req); !ds[0].BanStarted || ds[0].RetryAfter != time.Minute {
		t.Fatalf("the trip: %+v", ds[0])
	}
	if ds := m.AllowAt(t0.Add(20*time.Second), req); !ds[0].Banned || ds[0].BanStarted || ds[0].RetryAfter != 40*time.Second {
		t.Fatalf("banned: %+v", ds[0])
	}
	// the window is still full after the ban: the next denial trips again
	if ds := m.AllowAt(t0.Add(time.Minute), req); !ds[0].BanStarted {
		t.Fatalf("after the ban, still over the limit: %+v, want a new trip", ds[0])
	}
	_ = m.Reset(context.Background(), "k")
	if ds := m.AllowAt(t0.Add(61*time.Second), req); !ds[0].Allowed {
		t.Fatalf("after Reset: %+v", ds[0])
	}
	for i := range 100 {
		r := req[0]
		r.Key = string(rune('a' + i))
		m.AllowAt(t0, []Request{r})
		m.AllowAt(t0, []Request{r})
	}
	m.bans.mu.Lock()
	n := len(m.bans.until)
	m.bans.mu.Unlock()
	if n > 4 {
		t.Errorf("bans held: %d, want at most the bound 4", n)
	}
}
