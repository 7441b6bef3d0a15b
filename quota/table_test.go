package quota

import (
	"fmt"
	"testing"
)

// Two zones of one request whose keys are added at once (one key twice,
// here) each count their demand in their own key's one slot: adding the
// first must not leave the second with a slot moved or reused.
func TestQuotaLeasesAddKeysOfOneRequest(t *testing.T) {
	f := newLeaseFixture(t, 2048)
	r := leasing("twice", 100_000)
	r.Cost = quotaTrackUnits // tracked at first sight
	f.allow(t, r, r)
	sh := &f.q.shards[f.q.shardOf("twice")]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := 0
	for i := range sh.slots {
		if sh.slots[i].key == "twice" {
			n++
			if got := sh.slots[i].demand.cur; got != 2*r.Cost {
				t.Errorf("its slot counts %d units, want %d", got, 2*r.Cost)
			}
		}
	}
	if n != 1 {
		t.Errorf("the key has %d slots, want 1", n)
	}
}

func TestQuotaLeasesBoundTheirKeys(t *testing.T) {
	const keys = 2048
	f := newLeaseFixture(t, keys)
	for i := range 50_000 {
		r := leasing(fmt.Sprint("flood", i), 100_000)
		for range quotaTrackUnits { // seen enough: tracked
			f.allow(t, r)
		}
	}
	n := 0
	for i := range f.q.shards {
		n += len(f.q.shards[i].index)
		if len(f.q.shards[i].slots) > f.q.shards[i].size {
			t.Fatalf("shard %d holds %d slots, more than its %d", i, len(f.q.shards[i].slots), f.q.shards[i].size)
		}
	}
	if n > keys {
		t.Errorf("%d keys tracked, more than %d", n, keys)
	}
}
