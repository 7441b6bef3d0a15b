package algorithms_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// BenchmarkMemorySlidingLog: one key of a large sliding_log limit, kept
// full, every request admitted (one entry expires per request): the cost of
// one decision should not grow with the log.
// Run: go test -run '^$' -bench MemorySlidingLog ./algorithms
func BenchmarkMemorySlidingLog(b *testing.B) {
	for _, events := range []int64{100, 10_000} {
		b.Run(fmt.Sprint("events=", events), func(b *testing.B) {
			m := algorithms.NewMemoryStore()
			limit := algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: events, Window: time.Second}
			reqs := []algorithms.Request{{Key: "bench", Limit: limit, Cost: 1}}
			step := time.Second / time.Duration(events) // one entry leaves per request
			now := t0
			for range events {
				now = now.Add(step)
				m.AllowAt(now, reqs)
			}
			for b.Loop() {
				now = now.Add(step)
				if !m.AllowAt(now, reqs)[0].Allowed {
					b.Fatal("denied")
				}
			}
		})
	}
}

// TestSlidingLogRetryWalkIsBounded: a refusal reads at most SlidingLogWalk
// entries for its Retry-After, from the end of the log with fewer units to
// cross. A log of 1,000 one-unit entries, one a µs, refused a second
// later: when the entry whose leaving makes room lies within the walk, the
// answer is exact (its time + window − now); one entry further, it is when
// the newest entry leaves (newest + window − now), never earlier than a
// retry can pass and never later than the window.
func TestSlidingLogRetryWalkIsBounded(t *testing.T) {
	const events, walk = 1000, algorithms.SlidingLogWalk
	limit := algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: events, Window: time.Hour}
	m := algorithms.NewMemoryStore()
	for i := range events {
		if !m.AllowAt(t0.Add(time.Duration(i)*time.Microsecond), []algorithms.Request{{Key: "walk", Limit: limit, Cost: 1}})[0].Allowed {
			t.Fatalf("entry %d denied", i)
		}
	}
	now := t0.Add(time.Second)
	leaves := func(entry int64) time.Duration { // Retry-After until entry (0 the oldest) leaves
		return time.Hour - time.Second + time.Duration(entry)*time.Microsecond
	}
	newest := leaves(events - 1)
	for _, tt := range []struct {
		cost int64
		want time.Duration
	}{
		// oldest first (fewer units to free than to keep): cost c needs the
		// c-th oldest entry to leave
		{1, leaves(0)},
		{walk, leaves(walk - 1)},                   // the last entry the walk reads
		{walk + 1, newest},                         // one past it: when all have left
		{events / 2, newest},                       // the middle, the longest walk
		{events/2 + 1, newest},                     // newest first from here on
		{events - walk, newest},                    // the entry one past the walk
		{events - walk + 1, leaves(events - walk)}, // the walk's last entry from the newest end
		{events, newest},                           // exact: the newest entry itself
	} {
		got := m.AllowAt(now, []algorithms.Request{{Key: "walk", Limit: limit, Cost: tt.cost}})[0]
		if got.Allowed || got.RetryAfter != tt.want {
			t.Errorf("cost %d: got allowed %v, retry %v, want denied, retry %v", tt.cost, got.Allowed, got.RetryAfter, tt.want)
		}
		if got.RetryAfter > limit.Window {
			t.Errorf("cost %d: retry %v beyond the window", tt.cost, got.RetryAfter)
		}
	}
}
