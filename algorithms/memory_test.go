package algorithms_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
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

// BenchmarkMemoryKeys decides one-zone requests over 10^4 live keys in
// turn, per algorithm, from one goroutine and from all cores at once (the
// shards' locks), with the clock a parameter as the handler gives it.
// Run: go test -run '^$' -bench MemoryKeys -benchmem ./algorithms
func BenchmarkMemoryKeys(b *testing.B) {
	const keys = 10_000
	for _, alg := range []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindow, algorithms.SlidingLog, algorithms.TokenBucket} {
		limit := algorithms.Limit{Algorithm: alg, Events: algorithms.MaxLogEvents, Window: time.Hour}
		reqs := make([][]algorithms.Request, keys)
		for i := range reqs {
			reqs[i] = []algorithms.Request{{Key: fmt.Sprintf("sluice:api:{%022d}", i), Limit: limit, Cost: 1}}
		}
		warm := func(b *testing.B) *algorithms.MemoryStore {
			b.Helper()
			m := algorithms.NewMemoryStore()
			for _, r := range reqs {
				m.AllowAt(t0, r)
			}
			b.ReportAllocs()
			b.ResetTimer()
			return m
		}
		b.Run(string(alg), func(b *testing.B) {
			m, i := warm(b), 0
			for b.Loop() {
				m.AllowAt(t0.Add(time.Duration(i)*time.Microsecond), reqs[i%keys])
				i++
			}
		})
		b.Run(string(alg)+"/parallel", func(b *testing.B) {
			m := warm(b)
			var clock atomic.Int64 // one clock for all: time does not go back
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := clock.Add(1)
					m.AllowAt(t0.Add(time.Duration(i)*time.Microsecond), reqs[(i*7919)%keys])
				}
			})
		})
	}
}

// BenchmarkMemoryGC is one full garbage collection with the store holding
// 10^6 fixed_window keys (MaxMemoryKeys): what the GC pays, at every cycle,
// to mark what the store holds.
// Run: go test -run '^$' -bench MemoryGC -benchtime 10x ./algorithms
func BenchmarkMemoryGC(b *testing.B) {
	m := algorithms.NewMemoryStore()
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 100, Window: time.Hour}
	for i := range algorithms.MaxMemoryKeys {
		m.AllowAt(t0, []algorithms.Request{{Key: fmt.Sprintf("sluice:api:{%022d}", i), Limit: limit, Cost: 1}})
	}
	runtime.GC()
	b.ResetTimer()
	for b.Loop() {
		runtime.GC()
	}
	b.StopTimer()
	if got := m.Len(); got < algorithms.MaxMemoryKeys/2 {
		b.Fatalf("store holds %d keys, want most of %d", got, algorithms.MaxMemoryKeys)
	}
}
