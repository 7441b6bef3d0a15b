package algorithms_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

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
