package quota

import (
	"fmt"
	"testing"
	"time"
)

func tracked(f *leaseFixture, key string) bool {
	sh := &f.q.shards[f.q.shardOf(key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.find(key) != nil
}

func TestQuotaLeasesTrackKeysSeenEnough(t *testing.T) {
	f := newLeaseFixture(t, 2048)
	r := leasing("k", 100_000)
	span := demandSpan(r.Quota.For)
	for range quotaTrackUnits - 1 {
		f.allow(t, r)
		f.clock.Advance(span / quotaTrackUnits)
	}
	if tracked(f, "k") {
		t.Fatalf("a key seen for %d units is tracked", quotaTrackUnits-1)
	}
	f.clock.Advance(span/quotaTrackUnits + time.Millisecond)
	f.allow(t, r)
	if tracked(f, "k") {
		t.Fatal("a key seen for its units over more than a span is tracked")
	}
	for range quotaTrackUnits - 1 {
		f.allow(t, r)
	}
	if !tracked(f, "k") {
		t.Fatalf("a key seen for %d units within a span is not tracked", quotaTrackUnits)
	}
	r.Key, r.Cost = "costly", quotaTrackUnits
	f.allow(t, r)
	if !tracked(f, "costly") {
		t.Fatalf("a key seen once for %d units is not tracked", quotaTrackUnits)
	}

	hot := leasing("hot", 100_000)
	f.warm(t, hot)
	left := f.left("hot")
	for i := range 50_000 { // keys seen once, 25 times the bound: none takes the hot key's slot
		f.allow(t, leasing(fmt.Sprint("once", i), 100_000))
	}
	if got := f.left("hot"); got != left {
		t.Errorf("after a flood of keys seen once, the hot key holds %d units, want %d", got, left)
	}
	if n := len(f.store.giveBacks()); n != 0 {
		t.Errorf("%d give-backs, want none", n)
	}
}
