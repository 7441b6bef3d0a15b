package algorithms_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// t0 is aligned to every window used below, so windows start at t0.
var t0 = time.Unix(1_800_000_000, 0)

// TestMemoryStoreIsBounded: however many distinct keys arrive, the memory
// store holds at most its maximum.
func TestMemoryStoreIsBounded(t *testing.T) {
	m := algorithms.NewMemoryStoreOf(100)
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 5, Window: time.Hour}
	for i := range 1000 {
		ds := m.AllowAt(t0, []algorithms.Request{{Key: fmt.Sprint("k", i), Limit: limit, Cost: 1}})
		if !ds[0].Allowed {
			t.Fatalf("key %d denied", i)
		}
	}
	if got := m.Len(); got > 100 {
		t.Errorf("keys held: got %d, want at most 100", got)
	}
}

// TestMemoryStoreUsesOnlyGivenTime: expiry on insert goes by the time the
// caller gives, never the wall clock. At a time long past, a key that is
// still within its window (at that time) survives the expiry sampling of
// many new keys, and stays limited.
func TestMemoryStoreUsesOnlyGivenTime(t *testing.T) {
	for _, at := range []time.Time{time.Unix(1_000_000_000, 0), t0, time.Unix(4_000_000_000, 0)} {
		t.Run(at.UTC().Format(time.DateOnly), func(t *testing.T) {
			m := algorithms.NewMemoryStore()
			limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Hour}
			full := []algorithms.Request{{Key: "full", Limit: limit, Cost: 1}}
			if !m.AllowAt(at, full)[0].Allowed {
				t.Fatal("first request denied")
			}
			for i := range 300 { // each new key samples a few keys for expiry
				m.AllowAt(at, []algorithms.Request{{Key: fmt.Sprint("other", i), Limit: limit, Cost: 1}})
			}
			if d := m.AllowAt(at.Add(time.Minute), full)[0]; d.Allowed {
				t.Errorf("a minute later: got allowed, want denied (the key was expired by another clock)")
			}
		})
	}
}
