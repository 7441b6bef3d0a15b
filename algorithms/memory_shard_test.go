package algorithms

import (
	"fmt"
	"reflect"
	"strings"
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

// TestMemorySlotHasNoPointers: a slot is plain values, so the GC never
// scans the slots of a store however many keys it holds.
func TestMemorySlotHasNoPointers(t *testing.T) {
	typ := reflect.TypeFor[memorySlot]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		switch f.Type.Kind() {
		case reflect.Bool, reflect.Uint8, reflect.Int32, reflect.Int64, reflect.Uint64:
		case reflect.Array:
			if f.Type.Elem().Kind() != reflect.Uint8 {
				t.Errorf("field %s: array of %v, want bytes", f.Name, f.Type.Elem())
			}
		default:
			t.Errorf("field %s is a %v, want a plain value", f.Name, f.Type)
		}
	}
}

// TestMemoryShardKeysAndSideState: inline and long keys, sharing a hash,
// keep their own counters, logs and concurrency slots through updates and
// removal, and a removed key leaves nothing beside.
func TestMemoryShardKeysAndSideState(t *testing.T) {
	const hash = 7
	long := strings.Repeat("k", inlineKey+1)
	tests := []struct {
		key string
		s   state
	}{
		{"", state{a: 1, expires: 100}},
		{strings.Repeat("k", inlineKey), state{a: 2, log: []logEntry{{5, 1}, {6, 1}}, expires: 100}},
		{long, state{a: 3, slots: map[string]int64{"l": 9}, expires: 100}},
		{long + "x", state{a: 4, log: []logEntry{{7, 1}}, slots: map[string]int64{"m": 8}, expires: 100}},
	}
	sh := newMemoryShard(10)
	for _, tt := range tests {
		sh.put(tt.key, hash, tt.s, 0)
	}
	for _, tt := range tests {
		got := sh.get(tt.key, hash, 1)
		if !reflect.DeepEqual(got, tt.s) {
			t.Errorf("key of %d bytes: got %+v, want %+v", len(tt.key), got, tt.s)
		}
	}
	sh.put(tests[1].key, hash, state{a: 20, expires: 100}, 0) // the log goes
	if got := sh.get(tests[1].key, hash, 1); got.a != 20 || got.log != nil {
		t.Errorf("updated: got %+v, want a=20 and no log", got)
	}
	for _, tt := range tests {
		sh.delete(tt.key, hash)
	}
	if sh.live != 0 || len(sh.index) != 0 || len(sh.long) != 0 {
		t.Errorf("after removing all: live %d, index %d, long %d; want all 0", sh.live, len(sh.index), len(sh.long))
	}
	for i := range sh.logs {
		if sh.logs[i] != nil {
			t.Errorf("slot %d keeps log %v, want none", i, sh.logs[i])
		}
	}
	for i := range sh.ccSlots {
		if sh.ccSlots[i] != nil {
			t.Errorf("slot %d keeps concurrency slots %v, want none", i, sh.ccSlots[i])
		}
	}
}

// TestEvictionKeepsSlots: a full shard forgets expired keys and plain
// counters before a key that holds a concurrency slot or a reservation.
func TestEvictionKeepsSlots(t *testing.T) {
	sh := newMemoryShard(4)
	m := NewMemoryStore()
	const now, later = int64(1_000), int64(1_000_000_000)
	slot := state{slots: map[string]int64{"s": later}, expires: later, held: true}
	reserved := state{a: 5, expires: later, held: true}
	sh.put("slot", m.hash("slot"), slot, now)
	sh.put("reserved", m.hash("reserved"), reserved, now)
	for i := range 200 {
		key := fmt.Sprint("plain:", i)
		sh.put(key, m.hash(key), state{a: 1, expires: later}, now)
	}
	if got := sh.get("slot", m.hash("slot"), now); got.slots["s"] != later {
		t.Errorf("slot after 200 new keys: got %v, want held until %d", got.slots, later)
	}
	if got := sh.get("reserved", m.hash("reserved"), now); got.a != 5 {
		t.Errorf("reservation after 200 new keys: got %d, want 5", got.a)
	}
	if sh.live > 4 {
		t.Errorf("keys held: got %d, want at most 4", sh.live)
	}
}
