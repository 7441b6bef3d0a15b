package quota

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// On the real clock, leases left unused end by themselves, and their
// units go back.
func TestQuotaLeasesEndInTheBackground(t *testing.T) {
	store := newCountedStore(nil)
	q := NewLeases(store, store, "test", nil)
	defer q.Close()
	r := leasing("k", 100_000)
	r.Limit.Window = algorithms.MaxWindow // one window whenever the test runs
	admitted := int64(0)
	warm := time.Now().Add(10 * time.Second) // a key leases once its demand has lasted a span (500ms)
	for q.held.Load() == 0 {
		if time.Now().After(warm) {
			t.Fatal("no lease granted")
		}
		if ds, _ := q.Allow(context.Background(), []algorithms.Request{r}); ds[0].Allowed {
			admitted++
		}
		time.Sleep(time.Millisecond) // a steady stream, not a burst: a burst spends the limit before it warms
	}
	deadline := time.Now().Add(10 * time.Second)
	for q.held.Load() > 0 || store.used(t, r) != admitted {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s, %d leases held, and the store counts %d of %d admitted", q.held.Load(), store.used(t, r), admitted)
		}
		time.Sleep(time.Millisecond) // the sweep's own timer, which the test cannot wait on otherwise
	}
	if len(store.giveBacks()) == 0 {
		t.Error("no give-back")
	}
}
