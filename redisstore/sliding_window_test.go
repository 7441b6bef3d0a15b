package redisstore

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/leasetwin"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestSlidingWindowTwoBursts is issue 23's case: events 10 window 2s; 10
// requests 150 ms before an epoch-aligned 2 s edge, then 20 more 1.9 s
// later, inside one trailing 2 s window. None of the second burst may
// pass; each is told to retry when the first burst's slot (100 ms) has
// left the window, and then the whole quota is back.
func TestSlidingWindowTwoBursts(t *testing.T) {
	limit := algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 10, Window: 2 * time.Second}
	edge := aligned(2 * time.Second)
	first := edge.Add(-150 * time.Millisecond)
	second := first.Add(1900 * time.Millisecond)
	// the first burst's slot is [edge-200ms, edge-100ms): it has left at edge+1.9s
	back := edge.Add(1900 * time.Millisecond)
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			key := fmt.Sprintf("bursts:%d", rand.Int64())
			allow := func(now time.Time) algorithms.Decision {
				t.Helper()
				ds, err := store.AllowAt(context.Background(), now, []algorithms.Request{{Key: key, Limit: limit, Cost: 1}})
				if err != nil {
					t.Fatal(err)
				}
				return ds[0]
			}
			for i := range 10 {
				if d := allow(first.Add(time.Duration(i) * time.Millisecond)); !d.Allowed {
					t.Fatalf("first burst, request %d: denied (%+v)", i+1, d)
				}
			}
			for i := range 20 {
				now := second.Add(time.Duration(i) * time.Millisecond)
				d := allow(now)
				if d.Allowed {
					t.Errorf("second burst, request %d at +%v: admitted, the 11th..%dth in 2s", i+1, now.Sub(first), 11+i)
				}
				if got, want := d.RetryAfter, back.Sub(now); got != want {
					t.Errorf("second burst, request %d: RetryAfter %v, want %v (when the first burst's slot has left)", i+1, got, want)
				}
				if d.MoreAfter != d.RetryAfter || d.Remaining != 0 {
					t.Errorf("second burst, request %d: MoreAfter %v remaining %d, want %v and 0", i+1, d.MoreAfter, d.Remaining, d.RetryAfter)
				}
			}
			if d := allow(back.Add(-time.Microsecond)); d.Allowed {
				t.Errorf("1µs before the first burst's slot left: admitted")
			}
			for i := range 10 {
				if d := allow(back); !d.Allowed || d.Remaining != int64(9-i) {
					t.Errorf("request %d once the first burst left: allowed=%v remaining=%d, want true and %d (the whole quota back)", i+1, d.Allowed, d.Remaining, 9-i)
				}
			}
		})
	}
}

// TestSlidingWindowFreshKeyFullQuota: a key never seen reports its whole
// quota, nothing to come back, and (once consumed) when its slot leaves.
func TestSlidingWindowFreshKeyFullQuota(t *testing.T) {
	limit := algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 10, Window: time.Minute}
	now := aligned(time.Minute).Add(4 * time.Second) // 1 s into the slot [3s, 6s)
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			key := fmt.Sprintf("fresh:%d", rand.Int64())
			peeker, ok := store.(interface {
				Peek(context.Context, []algorithms.Request) ([]algorithms.Decision, error)
			})
			if !ok {
				t.Fatalf("%T has no Peek", store)
			}
			ds, err := peeker.Peek(context.Background(), []algorithms.Request{{Key: key, Limit: limit, Cost: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if d := ds[0]; !d.Allowed || d.Remaining != 10 || d.MoreAfter != 0 || d.ResetAfter != 0 {
				t.Errorf("fresh key: got %+v, want allowed, remaining 10, MoreAfter and ResetAfter 0", d)
			}
			ds, err = store.AllowAt(context.Background(), now, []algorithms.Request{{Key: key, Limit: limit, Cost: 3}})
			if err != nil {
				t.Fatal(err)
			}
			if d, want := ds[0], time.Minute+2*time.Second; d.Remaining != 7 || d.MoreAfter != want || d.ResetAfter != want {
				t.Errorf("after 3: got %+v, want remaining 7, MoreAfter and ResetAfter %v", d, want)
			}
		})
	}
}

// TestSlidingWindowSettleMatches drives random requests and settlements
// (refunds to 0 and debts, in the newest slot and in older ones) through
// both stores and requires identical decisions: the Go twin of the
// script's settle, where slots are removed and the newest replaced.
func TestSlidingWindowSettleMatches(t *testing.T) {
	limit := algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 12, Window: 2 * time.Second}
	ss := settlingStores(t)
	memory, redisStore := ss["memory"], ss["redis"]
	rng := rand.New(rand.NewPCG(23, 1))
	ctx := context.Background()
	now := aligned(2 * time.Second)
	key := fmt.Sprintf("swsettle:%d", rand.Int64())
	var taken []algorithms.Decision
	for i := range 3000 {
		now = now.Add(time.Duration(rng.Int64N(int64(150 * time.Millisecond))).Truncate(time.Microsecond))
		if len(taken) > 0 && rng.IntN(3) == 0 {
			d := taken[rng.IntN(len(taken))]
			delta := rng.Int64N(7) - 4 // -4..2: refunds (often to 0) and debts
			s := []algorithms.Settlement{{Key: key, Limit: limit, At: d.At, Delta: delta}}
			for name, store := range ss {
				if err := store.SettleAt(ctx, now, s); err != nil {
					t.Fatalf("step %d: %s: %v", i, name, err)
				}
			}
			continue
		}
		reqs := []algorithms.Request{{Key: key, Limit: limit, Cost: 1 + rng.Int64N(3)}}
		want, _ := memory.AllowAt(ctx, now, reqs)
		got, err := redisStore.AllowAt(ctx, now, reqs)
		if err != nil {
			t.Fatal(err)
		}
		if got[0] != want[0] {
			t.Fatalf("step %d (cost %d): redis %+v, memory %+v", i, reqs[0].Cost, got[0], want[0])
		}
		if want[0].Allowed {
			taken = append(taken[max(0, len(taken)-30):], want[0])
		}
	}
}

// bigReplay runs TestSlidingWindowReplay's embedded-store part at issue
// 23's scale: 15,000 sources for 30 minutes each, about 83 million
// decisions (under two minutes of CPU).
var bigReplay = flag.Bool("replay.big", false, "replay sliding_window at full scale")

// replayTraffic is one kind of traffic: arrivals (µs after the start) of
// one source for a limit of rate events per µs, over dur µs.
type replayTraffic struct {
	name     string
	arrivals func(rng *rand.Rand, rate float64, dur int64) []int64
}

// poisson arrivals at a rate drawn log-uniformly from lo..hi × rate.
func poisson(lo, hi float64) func(*rand.Rand, float64, int64) []int64 {
	return func(rng *rand.Rand, rate float64, dur int64) []int64 {
		r := rate * math.Exp(math.Log(lo)+rng.Float64()*(math.Log(hi)-math.Log(lo)))
		var ts []int64
		for t := rng.ExpFloat64() / r; t < float64(dur); t += rng.ExpFloat64() / r {
			ts = append(ts, int64(t))
		}
		return ts
	}
}

var replayTraffics = []replayTraffic{
	{"Poisson, 0.1–10× the limit", poisson(0.1, 10)},
	{"on/off bursts", func(rng *rand.Rand, rate float64, dur int64) []int64 {
		// on for 0.1–1 window at 2–20× the limit, off for 0.2–2 windows
		w := 1 / rate * 100 // the replay's limit is 100 a window
		var ts []int64
		for t := rng.Float64() * w; t < float64(dur); {
			on, r := t+w*(0.1+0.9*rng.Float64()), rate*(2+18*rng.Float64())
			for ; t < on && t < float64(dur); t += rng.ExpFloat64() / r {
				ts = append(ts, int64(t))
			}
			t = on + w*(0.2+1.8*rng.Float64())
		}
		return ts
	}},
	{"clumps of 20–150 requests", func(rng *rand.Rand, rate float64, dur int64) []int64 {
		// a clump every 0.3–3 windows, its requests within 5% of a window
		w := 1 / rate * 100
		var ts []int64
		for t := rng.Float64() * w; t < float64(dur); t += w * (0.3 + 2.7*rng.Float64()) {
			n, span := 20+rng.IntN(131), w*0.05*rng.Float64()
			clump := make([]int64, n)
			for i := range clump {
				clump[i] = int64(t + span*rng.Float64())
			}
			ts = append(ts, clump...)
		}
		sortInt64(ts)
		return ts
	}},
	{"Poisson, 0.9–1.1× the limit", poisson(0.9, 1.1)},
}

func sortInt64(ts []int64) {
	for i := 1; i < len(ts); i++ { // clumps are nearly sorted
		for j := i; j > 0 && ts[j] < ts[j-1]; j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
}

// replayStats compares a store's decisions with an exact sliding log of
// what the store admitted.
type replayStats struct {
	decisions, over, underRefused, late int
	sources, sourcesOver                int
	worst                               int64         // most admitted in a trailing window
	worstLate, sumLate                  time.Duration // refusals under the limit: how late
}

// replaySource sends one source's arrivals through store and checks each
// decision against the exact log of the admissions before it.
func replaySource(t *testing.T, store clockedStore, key string, limit algorithms.Limit, base time.Time, arrivals []int64, st *replayStats) {
	t.Helper()
	w, l := limit.Window.Microseconds(), (limit.Window.Microseconds()+algorithms.SlidingWindowSlots-1)/algorithms.SlidingWindowSlots
	var log []int64 // admitted times (cost 1 each), kept a window and two slots back
	over := false
	for _, at := range arrivals {
		now := base.UnixMicro() + at
		ds, err := store.AllowAt(context.Background(), time.UnixMicro(now), []algorithms.Request{{Key: key, Limit: limit, Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		d := ds[0]
		for len(log) > 0 && log[0] <= now-w-2*l {
			log = log[1:]
		}
		inWindow := 0 // admitted in (now-w, now]
		for i := len(log) - 1; i >= 0 && log[i] > now-w; i-- {
			inWindow++
		}
		// when an exact log admits this request: once the newest
		// events-th admission has left; -inf if it never holds more
		logAt := int64(math.MinInt64)
		if n := len(log); int64(n) >= limit.Events {
			logAt = log[n-int(limit.Events)] + w
		}
		st.decisions++
		if d.Allowed {
			log = append(log, now)
			if n := int64(inWindow + 1); n > limit.Events {
				st.over++
				over = true
				st.worst = max(st.worst, n)
			}
			st.worst = max(st.worst, int64(inWindow+1))
			continue
		}
		retryAt := now + d.RetryAfter.Microseconds()
		if retryAt < logAt {
			t.Errorf("%s at %d: RetryAfter %v, earlier than an exact log's %v", key, at, d.RetryAfter, time.Duration(logAt-now)*time.Microsecond)
		}
		if int64(inWindow) < limit.Events { // the log would admit it
			st.underRefused++
			late := time.Duration(retryAt-logAt) * time.Microsecond
			if logAt == math.MinInt64 || retryAt-logAt > l {
				t.Errorf("%s at %d: refused %v after an exact log would admit it, more than a slot (%v)", key, at, late, time.Duration(l)*time.Microsecond)
			}
			st.late++
			st.sumLate += late
			st.worstLate = max(st.worstLate, late)
		}
	}
	st.sources++
	if over {
		st.sourcesOver++
	}
}

func (st replayStats) row(name string, limit algorithms.Limit) string {
	pct := func(n, of int) string { return fmt.Sprintf("%.2f%%", 100*float64(n)/float64(max(1, of))) }
	meanLate := time.Duration(0)
	if st.late > 0 {
		meanLate = st.sumLate / time.Duration(st.late)
	}
	slot := limit.Window / algorithms.SlidingWindowSlots
	return fmt.Sprintf("| %s | %d | %s | %s | %+.0f%% | %s | %v (%.2f slot) | %v |",
		name, st.decisions, pct(st.over, st.decisions), pct(st.underRefused, st.decisions),
		100*float64(st.worst-limit.Events)/float64(limit.Events), pct(st.sourcesOver, st.sources),
		meanLate.Round(time.Millisecond), float64(meanLate)/float64(slot), st.worstLate.Round(time.Millisecond))
}

// replay runs every traffic kind with sources sources each over dur, and
// returns the table.
func replay(t *testing.T, store clockedStore, sources int, dur time.Duration) string {
	t.Helper()
	limit := algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 100, Window: time.Minute}
	rate := float64(limit.Events) / float64(limit.Window.Microseconds())
	base := aligned(limit.Window).Add(1234567 * time.Microsecond) // not on a slot's edge
	rows := []string{
		"| traffic | decisions | admitted over the limit | refused under it | worst overshoot in a trailing window | sources that exceeded the limit | refusals under it: mean late | worst late |",
		"|---|---|---|---|---|---|---|---|",
	}
	prefix := fmt.Sprintf("replay:%d:", rand.Int64())
	for k, tr := range replayTraffics {
		rng := rand.New(rand.NewPCG(23, uint64(k)))
		var st replayStats
		for i := range sources {
			key := fmt.Sprintf("%s%d:%d", prefix, k, i)
			start := base.Add(time.Duration(rng.Int64N(int64(limit.Window))).Truncate(time.Microsecond))
			replaySource(t, store, key, limit, start, tr.arrivals(rng, rate, dur.Microseconds()), &st)
		}
		if st.over > 0 {
			t.Errorf("%s: %d admissions over the limit, want none", tr.name, st.over)
		}
		rows = append(rows, st.row(tr.name, limit))
	}
	return strings.Join(rows, "\n")
}

// TestSlidingWindowReplay replays synthetic traffic of many sources (steady
// Poisson, on/off bursts, clumps, near the limit; seeded) through
// sliding_window at 100 a minute, and compares every decision with an
// exact sliding log of what it admitted: no admission over the limit, no
// Retry-After earlier than the log's, and every refusal the log would have
// admitted is at most one slot late. The embedded store runs 200 sources
// for 10 minutes each (-replay.big: 15,000 sources for 30 minutes), Redis
// 3 sources for 5 minutes per kind. -v prints the tables.
func TestSlidingWindowReplay(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		sources, dur := 200, 10*time.Minute
		if *bigReplay {
			sources, dur = 15_000/len(replayTraffics), 30*time.Minute
		}
		t.Logf("embedded store, %d sources per kind, %v each:\n%s", sources, dur, replay(t, memoryAt{leasetwin.NewMemoryStore()}, sources, dur))
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		t.Logf("Redis, 3 sources per kind, 5m each:\n%s", replay(t, New(srv.Client(t), Options{}), 3, 5*time.Minute))
	})
}

// BenchmarkSlidingWindowRedis decides one-zone sliding_window requests on
// Redis (batched Functions, the default store) from 32 goroutines, and
// reports, per decision, Redis CPU (INFO cpu) and the time inside the
// FCALLs (INFO commandstats usec, without their I/O):
//   - fresh: 10^5 keys in turn, each with a slot or two in use (the common
//     case: most keys are seen a few times a window), all admitted;
//   - busy: 100 keys on a simulated clock, each seen every 5 ms over a 1 s
//     window of 50 ms slots (every slot in use), all admitted;
//   - denied: the same at 10 a second, nearly all denied.
//
// With memory-usage-bytes: MEMORY USAGE of one busy key at the end.
// Run: go test -run '^$' -bench SlidingWindowRedis -benchtime 50000x ./redisstore
func BenchmarkSlidingWindowRedis(b *testing.B) {
	srv := redistest.Start(b)
	stats := srv.Client(b)
	cases := []struct {
		name   string
		keys   int64
		events int64
		window time.Duration
		step   time.Duration // simulated time per decision; 0: Redis TIME
	}{
		{"fresh", 100_000, 1_000_000_000, time.Hour, 0},
		{"busy", 100, 1_000_000_000, time.Second, 50 * time.Microsecond},
		{"denied", 100, 10, time.Second, 50 * time.Microsecond},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			store := New(srv.Client(b), Options{})
			if err := store.Warm(context.Background()); err != nil {
				b.Fatal(err)
			}
			limit := algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: c.events, Window: c.window}
			prefix := fmt.Sprintf("swbench:%s:%d:", c.name, time.Now().UnixNano())
			base := time.Now()
			var next atomic.Int64
			work0 := measureRedis(b, stats, "fcall")
			b.ResetTimer()
			var wg sync.WaitGroup
			for range 32 {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						reqs := []algorithms.Request{{Key: prefix + strconv.FormatInt(i*7919%c.keys, 10), Limit: limit, Cost: 1}}
						var err error
						if c.step == 0 {
							_, err = store.Allow(context.Background(), reqs)
						} else {
							_, err = store.AllowAt(context.Background(), base.Add(time.Duration(i)*c.step), reqs)
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			work0.report(b, stats, float64(b.N))
			usage, err := stats.MemoryUsage(context.Background(), prefix+"1", 0).Result()
			if err == nil {
				b.ReportMetric(float64(usage), "memory-usage-bytes")
			}
			n2, _ := stats.StrLen(context.Background(), prefix+"1").Result()
			b.ReportMetric(float64(n2), "state-bytes")
		})
	}
}
