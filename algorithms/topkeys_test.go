package algorithms_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// add is one Add call of a test stream.
type add struct {
	key string
	n   uint64
}

func TestTopKeysExactUnderCapacity(t *testing.T) {
	tests := []struct {
		name     string
		capacity int
		stream   []add
		n        int
		want     []algorithms.Counted
	}{
		{name: "empty", capacity: 4, n: 10, want: []algorithms.Counted{}},
		{
			name: "one key", capacity: 4, n: 10,
			stream: []add{{"a", 1}, {"a", 1}, {"a", 5}},
			want:   []algorithms.Counted{{Key: "a", Count: 7}},
		},
		{
			name: "sorted by count then key", capacity: 4, n: 0,
			stream: []add{{"c", 2}, {"b", 2}, {"a", 1}, {"d", 3}},
			want: []algorithms.Counted{
				{Key: "d", Count: 3}, {Key: "b", Count: 2}, {Key: "c", Count: 2}, {Key: "a", Count: 1},
			},
		},
		{
			name: "top n of exactly capacity keys", capacity: 3, n: 2,
			stream: []add{{"x", 1}, {"y", 4}, {"z", 2}, {"x", 9}, {"z", 1}},
			want:   []algorithms.Counted{{Key: "x", Count: 10}, {Key: "y", Count: 4}},
		},
		{
			name: "keys are compared exactly", capacity: 4, n: 0,
			stream: []add{{"", 1}, {"a", 1}, {"A", 1}, {"a ", 1}},
			want: []algorithms.Counted{
				{Key: "", Count: 1}, {Key: "A", Count: 1}, {Key: "a", Count: 1}, {Key: "a ", Count: 1},
			},
		},
		{
			name: "counts saturate", capacity: 2, n: 0,
			stream: []add{{"big", math.MaxUint64 - 1}, {"big", 5}},
			want:   []algorithms.Counted{{Key: "big", Count: math.MaxUint64}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			top := algorithms.NewTopKeys(tt.capacity)
			for _, a := range tt.stream {
				top.Add(a.key, a.n)
			}
			if got := top.Top(tt.n); !slices.Equal(got, tt.want) {
				t.Errorf("Top(%d) = %v, want %v", tt.n, got, tt.want)
			}
		})
	}
}

// TestTopKeysSpaceSavingGuarantee checks Space-Saving's bounds on skewed
// streams of more distinct keys than the sketch holds: every key counted
// more than N/capacity times is tracked, and each tracked count
// over-estimates by at most its Err, itself at most the least count.
func TestTopKeysSpaceSavingGuarantee(t *testing.T) {
	tests := []struct {
		name     string
		seed     uint64
		capacity int
		zipfS    float64 // skew, > 1
		keys     uint64  // distinct keys the stream draws from
		adds     int
		maxN     uint64 // each Add counts 1..maxN
	}{
		{name: "steep, unit adds", seed: 1, capacity: 64, zipfS: 1.5, keys: 10_000, adds: 200_000, maxN: 1},
		{name: "flat, unit adds", seed: 2, capacity: 64, zipfS: 1.05, keys: 100_000, adds: 200_000, maxN: 1},
		{name: "default capacity, weighted", seed: 3, capacity: algorithms.DefaultTopKeys, zipfS: 1.2, keys: 50_000, adds: 300_000, maxN: 5},
		{name: "tiny sketch", seed: 4, capacity: 4, zipfS: 1.3, keys: 1_000, adds: 50_000, maxN: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(tt.seed, tt.seed))
			zipf := rand.NewZipf(r, tt.zipfS, 1, tt.keys-1)
			top := algorithms.NewTopKeys(tt.capacity)
			truth := map[string]uint64{}
			var total uint64
			for range tt.adds {
				key, n := fmt.Sprintf("k%d", zipf.Uint64()), 1+r.Uint64N(tt.maxN)
				top.Add(key, n)
				truth[key] += n
				total += n
			}
			checkSpaceSaving(t, top.Top(0), truth, total, tt.capacity)
		})
	}
}

func checkSpaceSaving(t *testing.T, got []algorithms.Counted, truth map[string]uint64, total uint64, capacity int) {
	t.Helper()
	if len(got) != min(capacity, len(truth)) {
		t.Fatalf("tracks %d keys, want %d", len(got), min(capacity, len(truth)))
	}
	tracked := map[string]algorithms.Counted{}
	var sum uint64
	least := uint64(math.MaxUint64)
	for _, c := range got {
		tracked[c.Key] = c
		sum += c.Count
		least = min(least, c.Count)
	}
	if sum != total {
		t.Errorf("counts sum to %d, want the stream's weight %d", sum, total)
	}
	for _, c := range got {
		if c.Count < truth[c.Key] || c.Count-c.Err > truth[c.Key] {
			t.Errorf("key %s: count %d, err %d, want its true count %d in [count-err, count]", c.Key, c.Count, c.Err, truth[c.Key])
		}
		if c.Err > least {
			t.Errorf("key %s: err %d, want at most the least count %d", c.Key, c.Err, least)
		}
	}
	bound := total / uint64(capacity)
	heavy := 0
	for key, n := range truth {
		if n <= bound {
			continue
		}
		heavy++
		if _, ok := tracked[key]; !ok {
			t.Errorf("key %s counted %d > N/capacity = %d is not tracked", key, n, bound)
		}
	}
	if heavy == 0 {
		t.Errorf("no key above N/capacity = %d: the stream does not test the guarantee", bound)
	}
}

func TestTopKeysDrain(t *testing.T) {
	top := algorithms.NewTopKeys(2)
	for _, a := range []add{{"a", 3}, {"b", 1}, {"c", 1}} { // c takes b's place with err 1
		top.Add(a.key, a.n)
	}
	want := []algorithms.Counted{{Key: "a", Count: 3}, {Key: "c", Count: 2, Err: 1}}
	if got := top.Drain(); !slices.Equal(got, want) {
		t.Errorf("first Drain() = %v, want %v", got, want)
	}
	if got := top.Len(); got != 0 {
		t.Errorf("Len() after Drain = %d, want 0", got)
	}
	top.Add("b", 1)
	want = []algorithms.Counted{{Key: "b", Count: 1}}
	if got := top.Drain(); !slices.Equal(got, want) {
		t.Errorf("second Drain() = %v, want %v (counted since the first)", got, want)
	}
}

// TestTopKeysConcurrent adds from many goroutines while another drains
// and reads; under -race it checks the lock rule, and every count comes
// out of exactly one Drain.
func TestTopKeysConcurrent(t *testing.T) {
	const (
		writers = 8
		adds    = 5_000
		keys    = 50 // ≤ capacity: every count stays exact
	)
	top := algorithms.NewTopKeys(algorithms.DefaultTopKeys)
	drained := map[string]uint64{}
	done := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			_ = top.Top(10)
			for _, c := range top.Drain() {
				drained[c.Key] += c.Count
			}
		}
	})
	var writersWG sync.WaitGroup
	for w := range writers {
		writersWG.Go(func() {
			for i := range adds {
				top.Add(fmt.Sprintf("k%d", (w+i)%keys), 1)
			}
		})
	}
	writersWG.Wait()
	close(done)
	readers.Wait()
	for _, c := range top.Drain() {
		drained[c.Key] += c.Count
	}
	want := uint64(writers * adds / keys)
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		if got := drained[key]; got != want {
			t.Errorf("key %s: drained %d in all, want %d", key, got, want)
		}
	}
}

func TestTopKeysWindowExpiry(t *testing.T) {
	const span, slots = 5 * time.Minute, 5
	interval := span / slots
	t0 := time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC) // on a slot boundary
	tests := []struct {
		name  string
		adds  map[time.Duration]uint64 // offset from t0 → count of key "k"
		at    time.Duration
		wantK uint64 // 0: absent
	}{
		{name: "same instant", adds: map[time.Duration]uint64{0: 3}, at: 0, wantK: 3},
		{name: "end of its slot", adds: map[time.Duration]uint64{0: 3}, at: interval - 1, wantK: 3},
		{name: "a span later", adds: map[time.Duration]uint64{0: 3}, at: span, wantK: 3},
		{name: "last instant kept", adds: map[time.Duration]uint64{0: 3}, at: span + interval - 1, wantK: 3},
		{name: "expired", adds: map[time.Duration]uint64{0: 3}, at: span + interval, wantK: 0},
		{name: "long expired", adds: map[time.Duration]uint64{0: 3}, at: 10 * span, wantK: 0},
		{name: "before it happened", adds: map[time.Duration]uint64{interval: 3}, at: 0, wantK: 0},
		{name: "slots sum", adds: map[time.Duration]uint64{0: 1, interval: 2, 4 * interval: 4}, at: 4 * interval, wantK: 7},
		{name: "oldest slot leaves", adds: map[time.Duration]uint64{0: 1, interval: 2, 4 * interval: 4}, at: span + interval, wantK: 6},
		{
			name: "reused slot starts over",
			adds: map[time.Duration]uint64{0: 1, (slots + 1) * interval: 2}, // the same place in the ring
			at:   (slots + 1) * interval, wantK: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := algorithms.NewTopWindow(span, slots, 8)
			offsets := make([]time.Duration, 0, len(tt.adds))
			for off := range tt.adds {
				offsets = append(offsets, off)
			}
			slices.Sort(offsets) // in time order, as a clock would
			for _, off := range offsets {
				w.AddAt(t0.Add(off), "k", tt.adds[off])
				w.AddAt(t0.Add(off), "other", 1)
			}
			var want []algorithms.Counted
			if tt.wantK > 0 {
				want = []algorithms.Counted{{Key: "k", Count: tt.wantK}}
			}
			got := slices.DeleteFunc(w.TopAt(t0.Add(tt.at), 0), func(c algorithms.Counted) bool { return c.Key != "k" })
			if !slices.Equal(got, want) {
				t.Errorf("TopAt(t0+%v) = %v, want %v", tt.at, got, want)
			}
		})
	}
}

func TestTopKeysWindowRanks(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC)
	w := algorithms.NewTopWindow(time.Minute, 2, 4)
	w.AddAt(t0, "b", 5)
	w.AddAt(t0, "a", 1)
	w.AddAt(t0.Add(30*time.Second), "a", 4)
	w.AddAt(t0.Add(30*time.Second), "c", 9)
	want := []algorithms.Counted{{Key: "c", Count: 9}, {Key: "a", Count: 5}}
	if got := w.TopAt(t0.Add(40*time.Second), 2); !slices.Equal(got, want) {
		t.Errorf("TopAt(2) = %v, want %v (ties by key: a before b)", got, want)
	}
}

// BenchmarkTopKeys measures Add. Run with -benchmem: a tracked key costs
// no allocation.
func BenchmarkTopKeys(b *testing.B) {
	keys := make([]string, 4*algorithms.DefaultTopKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("sluice:api:{%016x}", rand.Uint64())
	}
	tracked := keys[:algorithms.DefaultTopKeys]
	full := func() *algorithms.TopKeys {
		top := algorithms.NewTopKeys(algorithms.DefaultTopKeys)
		for _, k := range tracked {
			top.Add(k, 1)
		}
		return top
	}
	b.Run("flood_one_key", func(b *testing.B) {
		top := full()
		b.ReportAllocs()
		for b.Loop() {
			top.Add(tracked[7], 1)
		}
	})
	b.Run("tracked_round_robin", func(b *testing.B) {
		top := full()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			top.Add(tracked[i%len(tracked)], 1)
			i++
		}
	})
	b.Run("untracked_churn", func(b *testing.B) { // each Add evicts the least counted key
		top := full()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			top.Add(keys[i%len(keys)], 1)
			i++
		}
	})
	b.Run("flood_parallel", func(b *testing.B) {
		top := full()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				top.Add(tracked[7], 1)
			}
		})
	})
	b.Run("window_flood_one_key", func(b *testing.B) {
		w := algorithms.NewTopWindow(0, 0, 0)
		now := time.Now()
		for _, k := range tracked {
			w.AddAt(now, k, 1)
		}
		b.ReportAllocs()
		for b.Loop() {
			w.AddAt(now, tracked[7], 1)
		}
	})
}

func TestMergeCounted(t *testing.T) {
	a := []algorithms.Counted{{Key: "x", Count: 5, Err: 1}, {Key: "y", Count: 3}}
	b := []algorithms.Counted{{Key: "y", Count: 4}, {Key: "z", Count: 7}}
	got := algorithms.MergeCounted(0, a, b)
	want := []algorithms.Counted{{Key: "y", Count: 7}, {Key: "z", Count: 7}, {Key: "x", Count: 5, Err: 1}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("got %+v, want %+v", got, want)
		}
	}
	if got := algorithms.MergeCounted(1, a, b); len(got) != 1 || got[0] != want[0] {
		t.Errorf("n=1: got %+v", got)
	}
	if got := algorithms.MergeCounted(3); len(got) != 0 {
		t.Errorf("nothing: got %+v", got)
	}
}

// TestGuaranteed: each key's count less its inherited error, keys with
// none left out, sorted by that count, then by key, and cut at n.
func TestGuaranteed(t *testing.T) {
	in := []algorithms.Counted{{"inherited", 9, 8}, {"exact", 5, 0}, {"none", 4, 4}, {"b", 3, 1}, {"a", 2, 0}}
	tests := []struct {
		n    int
		want []algorithms.Counted
	}{
		{0, []algorithms.Counted{{"exact", 5, 0}, {"a", 2, 0}, {"b", 2, 0}, {"inherited", 1, 0}}},
		{2, []algorithms.Counted{{"exact", 5, 0}, {"a", 2, 0}}},
		{10, []algorithms.Counted{{"exact", 5, 0}, {"a", 2, 0}, {"b", 2, 0}, {"inherited", 1, 0}}},
	}
	for _, tt := range tests {
		if got := algorithms.Guaranteed(tt.n, in); !slices.Equal(got, tt.want) {
			t.Errorf("Guaranteed(%d): got %+v, want %+v", tt.n, got, tt.want)
		}
	}
}
