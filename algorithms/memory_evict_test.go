package algorithms

import (
	"fmt"
	"testing"
)

// TestEvictionKeepsLeases: a full shard forgets expired keys and plain
// counters before a key that holds a lease or a reservation.
func TestEvictionKeepsLeases(t *testing.T) {
	sh := newMemoryShard(4)
	m := NewMemoryStore()
	const now, later = int64(1_000), int64(1_000_000_000)
	lease := state{leases: map[string]int64{"l": later}, expires: later, held: true}
	reserved := state{a: 5, expires: later, held: true}
	sh.put("lease", m.hash("lease"), lease, now)
	sh.put("reserved", m.hash("reserved"), reserved, now)
	for i := range 200 {
		key := fmt.Sprint("plain:", i)
		sh.put(key, m.hash(key), state{a: 1, expires: later}, now)
	}
	if got := sh.get("lease", m.hash("lease"), now); got.leases["l"] != later {
		t.Errorf("lease after 200 new keys: got %v, want held until %d", got.leases, later)
	}
	if got := sh.get("reserved", m.hash("reserved"), now); got.a != 5 {
		t.Errorf("reservation after 200 new keys: got %d, want 5", got.a)
	}
	if sh.live > 4 {
		t.Errorf("keys held: got %d, want at most 4", sh.live)
	}
}
