package redisstore

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/leasetwin"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestSlidingLogMatchesWithSettlements drives one random sequence of
// admissions (some at a clock that went back a little, or at one µs
// twice), refunds and debts through the memory store and Redis: every
// decision is equal, Retry-After included.
func TestSlidingLogMatchesWithSettlements(t *testing.T) {
	ss := settlingStores(t)
	memory, redisStore := ss["memory"], ss["redis"]
	ctx := context.Background()
	for _, limit := range []algorithms.Limit{
		{Algorithm: algorithms.SlidingLog, Events: 7, Window: 10 * time.Second},
		{Algorithm: algorithms.SlidingLog, Events: 10_000, Window: time.Minute},
	} {
		t.Run(fmt.Sprint(limit.Events), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, uint64(limit.Events)))
			key := fmt.Sprintf("log-settle:%d", rng.Int64())
			now := t0
			var admitted []int64 // times of admissions, for settlements
			for i := range 800 {
				switch r := rng.IntN(10); {
				case r == 0 && len(admitted) > 0: // refund or debt of an earlier admission
					at := admitted[rng.IntN(len(admitted))]
					delta := rng.Int64N(limit.Events) - limit.Events/2
					s := []algorithms.Settlement{{Key: key, Limit: limit, At: at, Delta: delta}}
					if err := memory.SettleAt(ctx, now, s); err != nil {
						t.Fatal(err)
					}
					if err := redisStore.SettleAt(ctx, now, s); err != nil {
						t.Fatal(err)
					}
					continue
				case r == 1: // the clock went back
					now = now.Add(-time.Duration(rng.Int64N(int64(limit.Window / 20))))
				case r == 2: // the same µs again
				default:
					now = now.Add(time.Duration(rng.Int64N(int64(limit.Window / 6))))
				}
				reqs := []algorithms.Request{{Key: key, Limit: limit, Cost: randomCost(rng, limit.Events)}}
				want, _ := memory.AllowAt(ctx, now, reqs)
				got, err := redisStore.AllowAt(ctx, now, reqs)
				if err != nil {
					t.Fatal(err)
				}
				if got[0] != want[0] {
					t.Fatalf("step %d (cost %d): redis %+v, memory %+v", i, reqs[0].Cost, got[0], want[0])
				}
				if got[0].Allowed {
					admitted = append(admitted, got[0].At)
				}
			}
		})
	}
}

// TestSlidingLogCostIsNotWork: a request's cost is units, not entries. 64
// keys of events 10,000 each take one request of cost 10,000 and one of
// cost 1 that is denied; each key then holds one entry beside its total
// in Redis (the first release held 10,000 members), and the denied
// request's Retry-After is still exact (the whole window).
func TestSlidingLogCostIsNotWork(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	store := New(client, Options{})
	ctx := context.Background()
	limit := algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: 10_000, Window: time.Hour}
	for k := range 64 {
		key := fmt.Sprintf("cost-work:%d", k)
		ds, err := store.AllowAt(ctx, t0, []algorithms.Request{{Key: key, Limit: limit, Cost: 10_000}})
		if err != nil || !ds[0].Allowed {
			t.Fatalf("key %d: got %+v, %v, want admitted", k, ds, err)
		}
		ds, err = store.AllowAt(ctx, t0.Add(time.Second), []algorithms.Request{{Key: key, Limit: limit, Cost: 1}})
		if err != nil || ds[0].Allowed || ds[0].RetryAfter != time.Hour-time.Second {
			t.Fatalf("key %d: got %+v, %v, want denied, retry %v", k, ds, err, time.Hour-time.Second)
		}
		if got, err := client.ZCard(ctx, key).Result(); err != nil || got > 2 {
			t.Fatalf("key %d: got %d members (%v), want at most 2 (one entry and the total)", k, got, err)
		}
	}
	// the memory store holds one entry too: bytes per request, not per unit
	m := leasetwin.NewMemoryStore()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for k := range 100 {
		m.AllowAt(t0, []algorithms.Request{{Key: fmt.Sprint("cost-work:", k), Limit: limit, Cost: 10_000}})
	}
	runtime.ReadMemStats(&after)
	if got := (after.TotalAlloc - before.TotalAlloc) / 100; got > 4096 {
		t.Errorf("memory store: got %d bytes allocated per request of cost 10,000, want at most 4096", got)
	}
}

// TestSlidingLogBoundedRetryMatches: Redis and the memory store give the
// same Retry-After on either side of the walk's bound, from either end. A
// log of 300 entries of 1 to 5 units (one a µs), refused a second later
// at every cost from 1 to events.
func TestSlidingLogBoundedRetryMatches(t *testing.T) {
	s := stores(t)
	memory, redisStore := s["memory"], s["redis"]
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(17, 2))
	key := fmt.Sprint("walk-diff:", rng.Int64())
	units := make([]int64, 300)
	var events int64
	for i := range units {
		units[i] = 1 + rng.Int64N(5)
		events += units[i]
	}
	limit := algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: events, Window: time.Hour}
	for i, n := range units {
		reqs := []algorithms.Request{{Key: key, Limit: limit, Cost: n}}
		at := t0.Add(time.Duration(i) * time.Microsecond)
		for name, store := range s {
			if ds, err := store.AllowAt(ctx, at, reqs); err != nil || !ds[0].Allowed {
				t.Fatalf("%s: entry %d: got %+v, %v, want admitted", name, i, ds, err)
			}
		}
	}
	now := t0.Add(time.Second)
	newest := limit.Window - time.Second + time.Duration(len(units)-1)*time.Microsecond
	var exact, bounded int
	for cost := int64(1); cost <= events; cost++ {
		reqs := []algorithms.Request{{Key: key, Limit: limit, Cost: cost}}
		want, _ := memory.AllowAt(ctx, now, reqs)
		got, err := redisStore.AllowAt(ctx, now, reqs)
		if err != nil {
			t.Fatal(err)
		}
		if got[0] != want[0] || got[0].Allowed {
			t.Fatalf("cost %d: redis %+v, memory %+v, want equal refusals", cost, got[0], want[0])
		}
		if got[0].RetryAfter == newest {
			bounded++
		} else {
			exact++
		}
	}
	if exact == 0 || bounded == 0 {
		t.Errorf("%d exact answers and %d at the newest entry, want some of each", exact, bounded)
	}
}

// TestSlidingLogRefusalWorkIsBounded: a refusal's Retry-After reads at
// most algorithms.SlidingLogWalk log entries, however long the log (issue
// 17, item 2). A key of events 10,000 holding 10,000 one-unit entries, and
// one batch (one call) of 64 requests of cost 5,000, each of whose exact
// answer lies 5,000 entries from either end: MONITOR shows every range
// read the script made, and the entries those ranges may return (their
// LIMIT counts; none skips entries by offset) stay within 64 × (walk + 1),
// the + 1 being the decision's read of the oldest entry. Before the bound
// the batch made 64 × 13 range reads that stepped over and returned
// 1,036,352 entries (pages of up to 1,024 at growing offsets). Work is
// counted, not timed.
func TestSlidingLogRefusalWorkIsBounded(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s := New(c, Options{})
	ctx := context.Background()
	limit := algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: 10_000, Window: time.Hour}
	key, filled := fillWalkLog(t, s, limit)

	mon, err := net.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	lines := bufio.NewReader(mon)
	if _, err := mon.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if ok, err := lines.ReadString('\n'); err != nil || ok != "+OK\r\n" {
		t.Fatalf("MONITOR: got %q, %v", ok, err)
	}
	calls := commandCalls(t, c, "zrangebyscore", "zrevrangebyscore")
	sendWorstDenials(t, s, key, limit, filled)
	calls = commandCalls(t, c, "zrangebyscore", "zrevrangebyscore") - calls
	marker := fmt.Sprint("walk-done-", rand.Int64())
	if err := c.Echo(ctx, marker).Err(); err != nil {
		t.Fatal(err)
	}

	const walk, refusals = algorithms.SlidingLogWalk, maxBatchRequests
	arg := regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)
	mon.SetReadDeadline(time.Now().Add(30 * time.Second))
	var ranges, limited, entries int64
	for {
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("MONITOR: %v (before the marker)", err)
		}
		if strings.Contains(line, marker) {
			break
		}
		args := arg.FindAllStringSubmatch(line, -1)
		if len(args) == 0 {
			continue
		}
		switch strings.ToUpper(args[0][1]) {
		case "ZRANGEBYSCORE", "ZREVRANGEBYSCORE", "ZRANGE", "ZREVRANGE":
		default:
			continue
		}
		ranges++
		for i := range args {
			if strings.ToUpper(args[i][1]) != "LIMIT" {
				continue
			}
			if i+2 >= len(args) {
				t.Fatalf("MONITOR line %q: LIMIT without offset and count", line)
			}
			offset, err1 := strconv.ParseInt(args[i+1][1], 10, 64)
			count, err2 := strconv.ParseInt(args[i+2][1], 10, 64)
			if err1 != nil || err2 != nil || count < 0 {
				t.Fatalf("MONITOR line %q: LIMIT %q %q", line, args[i+1][1], args[i+2][1])
			}
			limited++
			entries += offset + count // what Redis steps over, then returns at most
		}
	}
	t.Logf("batch of %d refusals: %d range reads (%d with LIMIT, commandstats: %d ZRANGEBYSCORE/ZREVRANGEBYSCORE) reading at most %d entries",
		refusals, ranges, limited, calls, entries)
	if entries > refusals*(walk+1) {
		t.Errorf("the batch's range reads may read %d entries, want at most %d × (%d + 1) = %d", entries, refusals, walk, refusals*(walk+1))
	}
	if unlimited := ranges - limited; unlimited > 2*refusals {
		// the newest entry (ZRANGE -1 -1) and the expired ones (none here)
		t.Errorf("%d range reads without LIMIT, want at most %d", unlimited, 2*refusals)
	}
	// the page sizes 16, 32, 16: three reads for the walk, and the two of
	// every decision (oldest entry, expired entries)
	if calls > refusals*5 {
		t.Errorf("commandstats: %d ZRANGEBYSCORE/ZREVRANGEBYSCORE calls, want at most %d", calls, refusals*5)
	}
}

// BenchmarkSlidingLogCost measures what a request's cost buys in Redis and
// in the memory store (issue 17, item 2): 64 sliding_log keys of events
// 10,000, each given one request of cost 10,000 in one batch (one call).
// It reports Redis's used_memory per key (and MEMORY USAGE of one), the slowest call in SLOWLOG
// (µs) and the memory store's heap bytes per request.
// Run: go test -run '^$' -bench SlidingLogCost -benchtime 1x ./redisstore
func BenchmarkSlidingLogCost(b *testing.B) {
	const keys, cost = 64, 10_000
	limit := algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: cost, Window: time.Hour}
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b)
		c := srv.Client(b)
		s := New(c, Options{})
		ctx := context.Background()
		if err := s.Warm(ctx); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			id := rand.Int64()
			c.ConfigSet(ctx, "slowlog-log-slower-than", "0")
			c.SlowLogReset(ctx)
			before := redistest.ReadInfo(b, c, "memory").Int("used_memory")
			batch := make([]*pending, keys)
			for k := range batch {
				key := fmt.Sprintf("cost:%d:%d", id, k)
				batch[k] = &pending{mode: modeConsume, reqs: []algorithms.Request{{Key: key, Limit: limit, Cost: cost}}}
			}
			s.sendBatch(ctx, batch, nil)
			for _, p := range batch {
				if p.err != nil || !p.ds[0].Allowed {
					b.Fatalf("got %v, %+v, want admitted", p.err, p.ds)
				}
			}
			after := redistest.ReadInfo(b, c, "memory").Int("used_memory")
			logs, err := c.SlowLogGet(ctx, 128).Result()
			if err != nil {
				b.Fatal(err)
			}
			var slowest time.Duration
			for _, l := range logs {
				slowest = max(slowest, l.Duration)
			}
			usage, err := c.MemoryUsage(ctx, batch[0].reqs[0].Key).Result()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(after-before)/keys, "redis-bytes/key")
			b.ReportMetric(float64(usage), "memory-usage-bytes/key")
			b.ReportMetric(float64(slowest.Microseconds()), "slowest-call-µs")
		}
	})
	// the worst denial: a log of 10,000 entries of one unit each, and a
	// batch of 64 requests of cost 5,000 (one call), each of whose exact
	// Retry-After needs the middle entry
	b.Run("redis-worst-denial", func(b *testing.B) {
		srv := redistest.Start(b)
		c := srv.Client(b)
		s := New(c, Options{})
		ctx := context.Background()
		key, now := fillWalkLog(b, s, limit)
		for b.Loop() {
			c.ConfigSet(ctx, "slowlog-log-slower-than", "0")
			c.SlowLogReset(ctx)
			// half the log must leave: the longest walk from either end
			sendWorstDenials(b, s, key, limit, now)
			logs, err := c.SlowLogGet(ctx, 128).Result()
			if err != nil {
				b.Fatal(err)
			}
			var slowest time.Duration
			for _, l := range logs {
				slowest = max(slowest, l.Duration)
			}
			b.ReportMetric(float64(slowest.Microseconds()), "slowest-call-µs")
		}
	})
	b.Run("memory", func(b *testing.B) {
		for b.Loop() {
			m := leasetwin.NewMemoryStore()
			now := time.Unix(1_700_000_000, 0)
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			before := ms.HeapAlloc
			for k := range 1000 {
				reqs := []algorithms.Request{{Key: fmt.Sprint("cost:", k), Limit: limit, Cost: cost}}
				if !m.AllowAt(now, reqs)[0].Allowed {
					b.Fatal("denied")
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(int64(ms.HeapAlloc)-int64(before))/1000, "heap-bytes/request")
			runtime.KeepAlive(m)
		}
	})
}

// fillWalkLog gives a fresh sliding_log key of limit (events 10,000) one
// entry of one unit per µs from now on until it is full, in batches of
// maxBatchRequests: the log a refusal walks longest.
func fillWalkLog(tb testing.TB, s *Store, limit algorithms.Limit) (string, time.Time) {
	tb.Helper()
	key := fmt.Sprint("walk:", rand.Int64())
	now := time.Unix(1_800_000_000, 0)
	batch := make([]*pending, 0, maxBatchRequests)
	for i := range limit.Events {
		at := fmt.Sprint(now.Add(time.Duration(i) * time.Microsecond).UnixMicro())
		batch = append(batch, &pending{mode: modeConsume, now: at, reqs: []algorithms.Request{{Key: key, Limit: limit, Cost: 1}}})
		if len(batch) == maxBatchRequests || i == limit.Events-1 {
			s.sendBatch(context.Background(), batch, nil)
			for _, p := range batch {
				if p.err != nil || !p.ds[0].Allowed {
					tb.Fatalf("filling: got %v, %+v, want admitted", p.err, p.ds)
				}
			}
			batch = batch[:0]
		}
	}
	return key, now
}

// sendWorstDenials sends one batch (one call) of maxBatchRequests requests
// of cost events/2 to fillWalkLog's key, a second after it was filled: each
// is refused, and its Retry-After is no earlier than the middle entry's
// leaving (the exact answer) and no later than the newest entry's.
func sendWorstDenials(tb testing.TB, s *Store, key string, limit algorithms.Limit, filled time.Time) {
	tb.Helper()
	now := filled.Add(time.Second)
	batch := make([]*pending, maxBatchRequests)
	for i := range batch {
		batch[i] = &pending{mode: modeConsume, now: fmt.Sprint(now.UnixMicro()),
			reqs: []algorithms.Request{{Key: key, Limit: limit, Cost: limit.Events / 2}}}
	}
	s.sendBatch(context.Background(), batch, nil)
	exact := limit.Window - time.Second + time.Duration(limit.Events/2-1)*time.Microsecond
	newest := limit.Window - time.Second + time.Duration(limit.Events-1)*time.Microsecond
	for _, p := range batch {
		if p.err != nil || p.ds[0].Allowed || p.ds[0].RetryAfter < exact || p.ds[0].RetryAfter > newest {
			tb.Fatalf("got %v, %+v, want denied, retry in [%v, %v]", p.err, p.ds, exact, newest)
		}
	}
}
