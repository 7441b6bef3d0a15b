package algorithms

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestMemoryShardCollisions: keys that share a 64-bit hash keep their own
// state through puts, updates and removals in any order of the chain.
func TestMemoryShardCollisions(t *testing.T) {
	const hash = 42
	keys := []string{"a", "b", "c", "d"}
	tests := []struct {
		name   string
		remove []string // removed after all are stored, in order
	}{
		{"none removed", nil},
		{"head", []string{"d"}}, // the last put heads the chain
		{"tail", []string{"a"}},
		{"middle", []string{"b", "c"}},
		{"all", []string{"c", "a", "d", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sh := newMemoryShard(100)
			for i, k := range keys {
				sh.put(k, hash, state{a: int64(i + 1), expires: 1000}, 0)
			}
			sh.put("b", hash, state{a: 20, expires: 1000}, 0) // an update, not a new slot
			want := map[string]int64{"a": 1, "b": 20, "c": 3, "d": 4}
			for _, k := range tt.remove {
				sh.delete(k, hash)
				delete(want, k)
			}
			for _, k := range keys {
				if got := sh.get(k, hash, 1).a; got != want[k] {
					t.Errorf("key %s: a = %d, want %d", k, got, want[k])
				}
			}
			if got := sh.live; got != len(want) {
				t.Errorf("live = %d, want %d", got, len(want))
			}
			sh.put("e", hash, state{a: 5, expires: 1000}, 0) // reuses a freed slot
			if got, want := sh.get("e", hash, 1).a, int64(5); got != want {
				t.Errorf("key e: a = %d, want %d", got, want)
			}
			if got, want := len(sh.slots), max(len(keys), len(want)+1); got != want {
				t.Errorf("slots = %d, want %d (freed slots reused)", got, want)
			}
		})
	}
}

// TestMemoryShardExpiresAndBounds: a full shard forgets a key for each new
// one, and sampled expiry frees expired keys as new ones arrive.
func TestMemoryShardExpiresAndBounds(t *testing.T) {
	sh := newMemoryShard(10)
	for i := range 1000 {
		sh.put(fmt.Sprint("k", i), uint64(i), state{a: 1, expires: 10}, 0)
		if sh.live > 10 {
			t.Fatalf("after %d puts: %d keys, want at most 10", i+1, sh.live)
		}
	}
	if got, want := len(sh.slots), 10; got != want {
		t.Errorf("slots = %d, want %d", got, want)
	}
	for i := range 200 { // the old keys expired at 10
		sh.put(fmt.Sprint("new", i), uint64(5000+i), state{a: 1, expires: 1 << 40}, 100)
	}
	live := 0
	for i := range 200 {
		if sh.get(fmt.Sprint("new", i), uint64(5000+i), 100).a == 1 {
			live++
		}
	}
	if live != sh.live || sh.live > 10 {
		t.Errorf("live = %d, found %d new keys, want them equal and at most 10", sh.live, live)
	}
}

// TestMemoryStoreShardsAreAtomic: requests over two keys (usually in two
// shards) from many goroutines never admit more than either key's limit,
// and admit exactly it when demand exceeds it.
func TestMemoryStoreShardsAreAtomic(t *testing.T) {
	m := NewMemoryStore()
	limit := Limit{Algorithm: FixedWindow, Events: 100, Window: time.Hour}
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	now := time.Unix(1_700_000_000, 0)
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				// every request takes key-x and one of two others; x is the bottleneck
				reqs := []Request{{Key: "key-x", Limit: limit, Cost: 1}, {Key: fmt.Sprint("key-", (g+i)%2), Limit: limit, Cost: 1}}
				if Admitted(reqs, m.AllowAt(now, reqs)) {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if admitted != 100 {
		t.Errorf("admitted %d of 400, want exactly 100", admitted)
	}
	d := m.PeekAt(now, []Request{{Key: "key-0", Limit: limit, Cost: 1}, {Key: "key-1", Limit: limit, Cost: 1}})
	if got, want := 200-d[0].Remaining-d[1].Remaining, int64(100); got != want {
		t.Errorf("used on key-0 and key-1: %d, want %d", got, want)
	}
}
