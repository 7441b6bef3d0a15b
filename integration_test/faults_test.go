package integration_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// The fault drills below break a real redis-server under a real Caddy and
// check what the docs promise: failure_mode decides while Redis fails,
// the circuit breaker keeps requests from paying the timeout one after
// another, and limiting comes back by itself. Timings are logged, never
// asserted tightly; the only time bounds asserted are coarse ones.
const (
	// drillEvents is the limit of every drill zone: drillEvents requests
	// per hour per key are admitted, the next is rejected.
	drillEvents = 5
	// drillRecover bounds how long limiting may take to work again once
	// Redis is healthy; the breaker's cool-down is about a second.
	drillRecover = 10 * time.Second
	// drillTimeout is the redis timeout of every drill.
	drillTimeout = 100 * time.Millisecond
)

// drillHandle is a `handle <path>` block with one rate_limit on the redis
// block given: zone limits drillEvents per hour, sliding_log, keyed by the
// X-Key header, in failure mode mode; admitted requests get "ok".
func drillHandle(path, zone, mode, redis string) string {
	return drillHandleAlg(path, zone, mode, "sliding_log", redis)
}

// drillHandleAlg is drillHandle with another algorithm.
func drillHandleAlg(path, zone, mode, algorithm, redis string) string {
	return fmt.Sprintf(`	handle %s {
		rate_limit {
%s			failure_mode %s
			zone %s {
				key {http.request.header.X-Key}
				algorithm %s
				events %d
				window 1h
			}
		}
		respond "ok" 200
	}
`, path, redis, mode, zone, algorithm, drillEvents)
}

// drillLimited is the status sequence of a fresh key under a working limit.
var drillLimited = wantStatuses(drillEvents, 1, http.StatusTooManyRequests)

// startDrillTraffic starts workers goroutines that GET url with the
// header X-Key set to key(worker, i) for their i-th request. They stop when
// stop is called, after maxTime, or after maxPerWorker requests each,
// whichever comes first. A request that takes 90% of drillTimeout or more
// counts as slow: it paid the timeout.
func startDrillTraffic(client *http.Client, url string, workers, maxPerWorker int, maxTime time.Duration, key func(worker, i int) string) *traffic {
	return startTraffic(client, trafficPlan{
		workers: workers,
		maxTime: maxTime,
		target: func(w, i int) (string, string, bool) {
			return url, key(w, i), i < maxPerWorker
		},
		slow: drillTimeout * 9 / 10,
	})
}

// drillProbe is what "limiting works again" means in a drill: a fresh key
// at url gets drillEvents admitted, then a rejection, and its state is
// written to rdb (so an in-memory fallback cannot pass for Redis), within
// drillRecover.
func drillProbe(rdb *redis.Client, url, prefix string) limitProbe {
	return limitProbe{
		what: url, url: url, prefix: prefix, want: drillLimited, within: drillRecover,
		keys: func() (int64, error) { return limitKeys(context.Background(), rdb) },
	}
}

// timedStatuses sends one request per key and returns the statuses and
// how long each took.
func timedStatuses(t *testing.T, client *http.Client, url string, keys []string) ([]int, []time.Duration) {
	t.Helper()
	got := make([]int, len(keys))
	took := make([]time.Duration, len(keys))
	for i, k := range keys {
		start := time.Now()
		got[i] = get(t, client, url, "X-Key", k).Status
		took[i] = time.Since(start)
	}
	return got, took
}

// repeatKey is n copies of s.
func repeatKey(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// numberedKeys is prefix0, prefix1, ... prefix(n-1).
func numberedKeys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// durationPercentile is the p-th percentile (0 < p ≤ 1) of ds, nearest rank.
func durationPercentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func sumDurations(ds []time.Duration) time.Duration {
	var total time.Duration
	for _, d := range ds {
		total += d
	}
	return total
}

// TestFaultRedisKilled kills Redis with SIGKILL under traffic, for each
// failure_mode: while it is dead, open admits everything, closed answers
// 503, local limits per instance; the circuit breaker keeps requests from
// each paying the timeout; after a restart (empty Redis, empty script
// cache) limiting works again by itself.
func TestFaultRedisKilled(t *testing.T) {
	tests := []struct {
		mode string
		// down is what drillEvents*10 requests on one fresh key get while
		// Redis is dead.
		down []int
		// traffic is the statuses allowed while Redis dies under traffic
		// on fresh keys.
		traffic []int
	}{
		{"open", wantStatuses(0, drillEvents*10, http.StatusOK), []int{http.StatusOK}},
		{"closed", wantStatuses(0, drillEvents*10, http.StatusServiceUnavailable), []int{http.StatusOK, http.StatusServiceUnavailable}},
		{"local", wantStatuses(drillEvents, drillEvents*9, http.StatusTooManyRequests), []int{http.StatusOK}},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			srv := redistest.Start(t)
			caddy := startCaddy(t, caddyConfig{Site: drillHandle("", "killed", tt.mode, redisBlock(srv, "timeout "+drillTimeout.String()))})
			client := newClient(8)

			if got := statuses(t, client, caddy.URL, drillEvents+1, "X-Key", "up"); !slices.Equal(got, drillLimited) {
				t.Fatalf("Redis up: got statuses %v, want %v", got, drillLimited)
			}
			upStatuses, upTook := timedStatuses(t, client, caddy.URL, numberedKeys("lat-up-", 50))
			if want := wantStatuses(50, 0, 0); !slices.Equal(upStatuses, want) {
				t.Fatalf("Redis up, fresh keys: got statuses %v, want all 200", upStatuses)
			}

			// Kill Redis in the middle of traffic on fresh keys.
			tr := startDrillTraffic(client, caddy.URL, 4, 5000, 20*time.Second, func(w, i int) string {
				return fmt.Sprintf("traffic-%d-%d", w, i)
			})
			tr.waitSent(t, 200, 10*time.Second)
			srv.Kill()
			tr.waitSent(t, tr.sent.Load()+200, 10*time.Second)
			tr.stop().check(t, "traffic while Redis is killed", tt.traffic...)

			// The first requests after the kill open the breaker.
			_, _ = timedStatuses(t, client, caddy.URL, numberedKeys("warm-", 10))
			const n = drillEvents * 10
			downStatuses, downTook := timedStatuses(t, client, caddy.URL, repeatKey("down", n))
			if !slices.Equal(downStatuses, tt.down) {
				t.Errorf("failure_mode %s, Redis dead: got statuses %v, want %v", tt.mode, downStatuses, tt.down)
			}
			t.Logf("failure_mode %s: latency Redis up p50 %v p99 %v; Redis dead p50 %v p99 %v, %d requests in %v",
				tt.mode, durationPercentile(upTook, 0.5), durationPercentile(upTook, 0.99),
				durationPercentile(downTook, 0.5), durationPercentile(downTook, 0.99), n, sumDurations(downTook))
			// Each request paying the timeout would take n*timeout; the
			// breaker (and a refused connection) make it far less.
			if total, bound := sumDurations(downTook), n*drillTimeout/4; total >= bound {
				t.Errorf("failure_mode %s, Redis dead: %d requests took %v, want < %v: requests pay the timeout", tt.mode, n, total, bound)
			}

			srv.Restart(t)
			waitLimiting(t, client, drillProbe(srv.Client(t), caddy.URL, "back-"))
		})
	}
}

// TestFaultRedisFrozen freezes Redis with SIGSTOP for 3 s: the TCP
// connections stay up but nothing answers, the case a timeout exists for.
// During the freeze, three workers send fresh keys and one floods a key
// already at its limit (the deny cache may answer that one, exactly, with
// 429). Every request completes (well within 2 s); with failure_mode open,
// fresh keys are admitted; and the circuit breaker keeps requests from
// paying the timeout one after another: only the first failures and one
// probe per cool-down (about 1 s) may. After SIGCONT, limiting works again.
func TestFaultRedisFrozen(t *testing.T) {
	const freeze = 3 * time.Second
	const slowest = 2 * time.Second // asserted per request: never hangs
	// A working breaker lets about 5 failures, the requests in flight
	// with them, and ~3 probes pay the timeout in 3 s; generously:
	const maxPaid = 20
	srv := redistest.Start(t)
	caddy := startCaddy(t, caddyConfig{Site: drillHandle("", "frozen", "open", redisBlock(srv, "timeout "+drillTimeout.String()))})
	client := newClient(8)
	client.Timeout = 5 * time.Second // a hung request fails instead of blocking the test

	if got := statuses(t, client, caddy.URL, drillEvents+1, "X-Key", "limited"); !slices.Equal(got, drillLimited) {
		t.Fatalf("Redis up: got statuses %v, want %v", got, drillLimited)
	}
	// Warm the pool's connections before the freeze.
	warm := startDrillTraffic(client, caddy.URL, 4, 50, 10*time.Second, func(w, i int) string { return fmt.Sprintf("warm-%d-%d", w, i) })
	warm.wait().check(t, "warm-up", http.StatusOK)

	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	t.Cleanup(func() { _ = srv.Signal(syscall.SIGCONT) })

	fresh := startDrillTraffic(client, caddy.URL, 3, 100000, freeze, func(w, i int) string {
		return fmt.Sprintf("frozen-%d-%d", w, i)
	})
	flood := startDrillTraffic(client, caddy.URL, 1, 100000, freeze, func(int, int) string { return "limited" })
	freshRes, floodRes := fresh.wait(), flood.wait()
	if err := srv.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("Redis frozen for %v", time.Since(frozen).Round(time.Millisecond))
	freshRes.check(t, "fresh keys while Redis is frozen", http.StatusOK)
	floodRes.check(t, "key at its limit while Redis is frozen", http.StatusOK, http.StatusTooManyRequests)
	for _, res := range []trafficResult{freshRes, floodRes} {
		if res.slowest >= slowest {
			t.Errorf("while Redis was frozen the slowest request took %v, want < %v", res.slowest, slowest)
		}
	}
	if paid := freshRes.slow + floodRes.slow; paid > maxPaid {
		t.Errorf("while Redis was frozen %d requests paid the %v timeout, want at most %d: the circuit breaker did not keep them from Redis",
			paid, drillTimeout, maxPaid)
	}

	waitLimiting(t, client, drillProbe(srv.Client(t), caddy.URL, "thawed-"))
}

// TestFaultScriptFlushAndFlushAll empties Redis's script cache and then its
// data under traffic. With failure_mode closed any failure would show as a
// 503: there must be none (NOSCRIPT is answered by EVAL), and limiting
// still works afterwards. The timeout is generous (not drillTimeout): this
// drill looks for errors, and on a busy machine a slow answer would be a
// 503 too.
func TestFaultScriptFlushAndFlushAll(t *testing.T) {
	srv := redistest.Start(t)
	caddy := startCaddy(t, caddyConfig{Site: drillHandle("", "flushed", "closed", redisBlock(srv, "timeout 5s"))})
	client := newClient(8)
	rdb := srv.Client(t)
	ctx := context.Background()

	// Each key gets drillEvents+1 requests in a row: admitted, admitted,
	// ..., denied. Every one of them reaches Redis (a key is only in the
	// deny cache once it is done with), and both 200 and 429 occur.
	tr := startDrillTraffic(client, caddy.URL, 4, 20000, 20*time.Second, func(w, i int) string {
		return fmt.Sprintf("k-%d-%d", w, i/(drillEvents+1))
	})
	for round := range 5 {
		tr.waitSent(t, tr.sent.Load()+300, 10*time.Second)
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatalf("round %d: SCRIPT FLUSH: %v", round, err)
		}
		tr.waitSent(t, tr.sent.Load()+300, 10*time.Second)
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatalf("round %d: FLUSHALL: %v", round, err)
		}
	}
	tr.waitSent(t, tr.sent.Load()+300, 10*time.Second)
	tr.stop().check(t, "traffic during SCRIPT FLUSH and FLUSHALL", http.StatusOK, http.StatusTooManyRequests)
	stats := redistest.ReadInfo(t, rdb, "commandstats")
	t.Logf("Redis %s; %s", stats.Show("cmdstat_evalsha"), stats.Show("cmdstat_eval"))
	if t.Failed() {
		logStoreErrors(t, caddy)
	}

	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// No poll: nothing failed, so limiting must work at once.
	if got := statuses(t, client, caddy.URL, drillEvents+1, "X-Key", "after"); !slices.Equal(got, drillLimited) {
		t.Errorf("after SCRIPT FLUSH and FLUSHALL: got statuses %v, want %v", got, drillLimited)
	}
	if n, err := limitKeys(ctx, rdb); err != nil || n != 1 {
		t.Errorf("after FLUSHALL and one key: DBSIZE got %d (%v), want 1", n, err)
	}
}

// TestFaultRedisOutOfMemory fills a Redis that has maxmemory with
// noeviction, for each algorithm: Redis refuses a new key's first write
// with OOM. failure_mode closed answers 503 and logs the cause with the
// failure mode; open admits. Once memory is freed, limiting works again.
// Each algorithm has its own Redis and Caddy, so that one algorithm's
// failures do not open the circuit breaker for the next.
func TestFaultRedisOutOfMemory(t *testing.T) {
	for _, alg := range []string{"fixed_window", "sliding_window", "sliding_log", "token_bucket"} {
		t.Run(alg, func(t *testing.T) { testOutOfMemory(t, alg) })
	}
}

func testOutOfMemory(t *testing.T, alg string) {
	srv := redistest.Start(t, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
	redisLines := redisBlock(srv, "timeout "+drillTimeout.String())
	caddy := startCaddy(t, caddyConfig{Site: drillHandleAlg("/closed", "oomclosed", "closed", alg, redisLines) +
		drillHandleAlg("/open", "oomopen", "open", alg, redisLines)})
	client := newClient(4)
	rdb := srv.Client(t)
	ctx := context.Background()

	for _, path := range []string{"/closed", "/open"} {
		waitLimiting(t, client, drillProbe(rdb, caddy.URL+path, "before-"))
	}

	filled := fillRedis(t, rdb)
	t.Logf("Redis filled past maxmemory 2mb: %s", redistest.ReadInfo(t, rdb, "memory").Show("used_memory_human"))
	keysBefore, _ := rdb.DBSize(ctx).Result()

	// Three requests: fewer than the breaker's threshold, so each one
	// reaches Redis and meets the OOM itself.
	for i := range 3 {
		if got := get(t, client, caddy.URL+"/closed", "X-Key", "new-closed-"+strconv.Itoa(i)).Status; got != http.StatusServiceUnavailable {
			t.Errorf("%s, failure_mode closed, Redis out of memory (noeviction), new key: got status %d, want 503", alg, got)
		}
	}
	if keysAfter, _ := rdb.DBSize(ctx).Result(); keysAfter != keysBefore {
		t.Errorf("%s: Redis over maxmemory with noeviction: new keys written anyway: DBSIZE %d, want %d (%s, maxmemory 2mb)",
			alg, keysAfter, keysBefore, redistest.ReadInfo(t, rdb, "memory").Show("used_memory_human"))
	}
	waitLogEntry(t, caddy, func(e map[string]any) bool {
		if e["level"] != "error" || e["failure_mode"] != "closed" {
			return false
		}
		b, _ := json.Marshal(e)
		s := string(b)
		return strings.Contains(s, "OOM") || strings.Contains(s, "out_of_memory")
	}, "error entry with failure_mode closed that names the OOM cause")

	for i := range 3 {
		if got := get(t, client, caddy.URL+"/open", "X-Key", "new-open-"+strconv.Itoa(i)).Status; got != http.StatusOK {
			t.Errorf("%s, failure_mode open, Redis out of memory, new key: got status %d, want 200", alg, got)
		}
	}

	if err := rdb.Del(ctx, filled).Err(); err != nil {
		t.Fatalf("freeing memory: %v", err)
	}
	t.Logf("Redis memory freed: %s", redistest.ReadInfo(t, rdb, "memory").Show("used_memory_human"))
	waitLimiting(t, client, drillProbe(rdb, caddy.URL+"/closed", "freed-"))
}

// fillRedis takes Redis past its maxmemory: SETRANGE at a 3 MiB offset
// makes a 3 MiB string from a tiny command, which passes the memory check
// made before it runs. It returns the key it wrote.
func fillRedis(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	const key = "fill:big"
	if err := rdb.SetRange(context.Background(), key, 3<<20, "x").Err(); err != nil {
		t.Fatalf("filling Redis: %v", err)
	}
	err := rdb.Set(context.Background(), "fill:probe", "x", 0).Err()
	if err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("filling Redis: a SET after it got error %v, want OOM", err)
	}
	return key
}

// waitLogEntry polls Caddy's JSON log, for up to 5 s, for an entry match
// accepts.
func waitLogEntry(t *testing.T, caddy *caddyProc, match func(map[string]any) bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		sc := bufio.NewScanner(strings.NewReader(caddy.Log.String()))
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			var e map[string]any
			if json.Unmarshal(sc.Bytes(), &e) == nil && match(e) {
				t.Logf("log entry: %s", sc.Text())
				return
			}
		}
	}
	t.Errorf("Caddy's log holds no %s", what)
}

// logStoreErrors logs, once each, the store errors Sluice logged: why
// requests were decided by failure_mode.
func logStoreErrors(t *testing.T, caddy *caddyProc) {
	t.Helper()
	seen := make(map[string]bool)
	sc := bufio.NewScanner(strings.NewReader(caddy.Log.String()))
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var e struct {
			Level, Logger, Error, Cause string
			Mode                        string `json:"failure_mode"`
		}
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Level != "error" || e.Logger != "http.handlers.rate_limit" {
			continue
		}
		line := fmt.Sprintf("cause %s, failure_mode %s: %s", e.Cause, e.Mode, e.Error)
		if !seen[line] {
			seen[line] = true
			t.Logf("store error logged by Caddy: %s", line)
		}
	}
}
