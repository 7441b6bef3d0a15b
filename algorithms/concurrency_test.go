package algorithms_test

import (
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// TestConcurrencyDecisionInPlace: a concurrency decision on the memory
// store counts the live slots where they are: no copy of them per
// decision, however many are held.
func TestConcurrencyDecisionInPlace(t *testing.T) {
	m := algorithms.NewMemoryStore()
	limit := algorithms.Limit{Algorithm: algorithms.Concurrency, Events: 5000, Window: time.Hour}
	for i := range 1000 {
		r := algorithms.Request{Key: "inplace", Limit: limit, Cost: 1, Slot: string(rune('a'+i%26)) + time.Duration(i).String()}
		if !m.AllowAt(t0, []algorithms.Request{r})[0].Allowed {
			t.Fatalf("slot %d denied", i)
		}
	}
	reqs := []algorithms.Request{{Key: "inplace", Limit: limit, Cost: 1, Slot: "peek"}}
	if got := testing.AllocsPerRun(20, func() { m.PeekAt(t0, reqs) }); got > 1 {
		t.Errorf("allocations per decision with 1000 slots held: got %v, want at most 1 (the decisions)", got)
	}
}
