package sluice

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// twoZones is a rate_limit with two zones that admit everything the
// benchmarks send, plus the given store block.
func twoZones(store string) string {
	return rateLimit(store,
		zoneCfg(uniqueZone("bench_ip"), "key {http.vars.client_ip}", "algorithm token_bucket", "events 1000000", "window 1s"),
		zoneCfg(uniqueZone("bench_key"), "key {http.request.header.X-Key}", "algorithm fixed_window", "events 1000000000", "window 1h"),
	)
}

// benchServe runs h on one prepared request per iteration: what it measures
// is the handler's decision path, not request setup. Besides ns/op it
// reports cpu-ns/op, this process's CPU per request (GC included), which
// other load on the machine inflates far less than the wall time.
func benchServe(b *testing.B, h *Handler) {
	req := httptest.NewRequest(http.MethodGet, "http://example.com/api", nil)
	req.RemoteAddr = "192.0.2.1:1234"
	req.Header.Set("X-Key", "tenant-42")
	req.Header.Set("X-Limit", "999999999") // read only by zones with a limit per request
	rec := httptest.NewRecorder()
	req = caddyhttp.PrepareRequest(req, caddy.NewReplacer(), rec, nil)
	caddyhttp.SetVar(req.Context(), caddyhttp.ClientIPVarKey, "192.0.2.1")
	next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	for b.Loop() {
		clear(rec.Header())
		if err := h.ServeHTTP(rec, req, next); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

func BenchmarkServeHTTP(b *testing.B) {
	b.Run("memory/two_zones", func(b *testing.B) {
		benchServe(b, newHandler(b, twoZones("")))
	})
	// the same two zones with their limits per request (X-Limit): what
	// reading and parsing the placeholders costs (one allocation each, in
	// Caddy's request-header placeholder, as for a key)
	b.Run("memory/two_zones_limit_per_request", func(b *testing.B) {
		benchServe(b, newHandler(b, rateLimit(
			zoneCfg(uniqueZone("bench_ip"), "key {http.vars.client_ip}", "algorithm token_bucket", "events {http.request.header.X-Limit} 1000000", "window 1s"),
			zoneCfg(uniqueZone("bench_key"), "key {http.request.header.X-Key}", "algorithm fixed_window", "events {http.request.header.X-Limit} 1000000000", "window 1h"),
		)))
	})
	// the same two zones with overrides (none set): what reading the
	// overrides costs, a copy of the requests with their limits in force
	b.Run("memory/two_zones_overrides", func(b *testing.B) {
		benchServe(b, newHandler(b, rateLimit(
			zoneCfg(uniqueZone("bench_ip"), "key {http.vars.client_ip}", "algorithm token_bucket", "events 1000000", "window 1s", "overrides"),
			zoneCfg(uniqueZone("bench_key"), "key {http.request.header.X-Key}", "algorithm fixed_window", "events 1000000000", "window 1h", "overrides"),
		)))
	})
	b.Run("redis/two_zones", func(b *testing.B) {
		srv := redistest.Start(b)
		benchServe(b, newHandler(b, twoZones(block("redis", "url "+srv.URL(), "timeout 1s"))))
	})
}

func BenchmarkStoreKey(b *testing.B) {
	z := &Zone{keyPrefix: "sluice:api:", limit: algorithms.Limit{Algorithm: algorithms.SlidingWindow}}
	b.ReportAllocs()
	for b.Loop() {
		_ = z.storeKey("tenant-42:203.0.113.7:GET/api/v1/orders")
	}
}

func BenchmarkHeaders(b *testing.B) {
	limit := algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 100, Window: time.Minute}
	zones := []*Zone{
		{name: "api", limit: limit, policy: policyMember("api", limit)},
		{name: "ip", limit: limit, policy: policyMember("ip", limit)},
	}
	ds := []algorithms.Decision{{Allowed: true, Remaining: 42, ResetAfter: 18 * time.Second}, {Allowed: true, Remaining: 7, ResetAfter: time.Second}}
	h := http.Header{}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		clear(h)
		(styleIETF | styleLegacy | styleX).writeAll(h, &verdict{zones: zones, ds: ds}, now, 0)
	}
}

// oneZone is a rate_limit with one zone keyed by X-Key on the embedded
// store.
func oneZone(algorithm string, events int64) string {
	return rateLimit(zoneCfg(uniqueZone("bench_"+algorithm), "key {http.request.header.X-Key}",
		"algorithm "+algorithm, "events "+strconv.FormatInt(events, 10), "window 1m"))
}

// benchServeKeys runs h over keys distinct X-Key values in turn, each sent
// once before the timer starts, so the store holds them all live: the
// embedded store's cost with many keys (bench/run.sh's memory systems).
// It reports cpu-ns/op as benchServe does.
func benchServeKeys(b *testing.B, h *Handler, keys int) {
	b.Helper()
	req := httptest.NewRequest(http.MethodGet, "http://example.com/api", nil)
	rec := httptest.NewRecorder()
	req = caddyhttp.PrepareRequest(req, caddy.NewReplacer(), rec, nil)
	values := make([][]string, keys) // one header value slice per key: no allocation in the loop
	for i := range values {
		values[i] = []string{"tenant-" + strconv.Itoa(i)}
	}
	next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })
	serve := func(i int) error {
		req.Header["X-Key"] = values[i%keys]
		clear(rec.Header())
		return h.ServeHTTP(rec, req, next)
	}
	for i := range keys {
		if err := serve(i); err != nil {
			b.Fatalf("warming key %d: %v", i, err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	i := 0
	for b.Loop() {
		if err := serve(i); err != nil {
			b.Fatalf("request %d: %v (a key reached its limit: fewer iterations or more keys)", i, err)
		}
		i++
	}
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkServeHTTPKeys is the embedded store with many live keys, one
// row per algorithm, and sliding_log at a large limit, whose log grows by
// b.N/keys entries a key (keep b.N under events × keys: -benchtime 2s runs
// about 10^6).
func BenchmarkServeHTTPKeys(b *testing.B) {
	cases := []struct {
		name      string
		algorithm string
		events    int64
		keys      int
	}{
		{"fixed_window/10k_keys", "fixed_window", 1_000_000_000, 10_000},
		{"token_bucket/10k_keys", "token_bucket", 1_000_000, 10_000},
		{"sliding_window/10k_keys", "sliding_window", 1_000_000_000, 10_000},
		{"sliding_log/events_10000/10k_keys", "sliding_log", 10_000, 10_000},
		{"sliding_log/events_10000/1k_keys", "sliding_log", 10_000, 1_000},
	}
	for _, c := range cases {
		b.Run("memory/"+c.name, func(b *testing.B) {
			benchServeKeys(b, newHandler(b, oneZone(c.algorithm, c.events)), c.keys)
		})
	}
}

// processCPU is the CPU time this process has used, user and system: the
// handler's side of a benchmark whose Redis runs in another process.
func processCPU(b *testing.B) int64 {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// benchRequest is one prepared request with its own recorder, keyed by
// X-Key and coming from ip.
func benchRequest(key, ip string) (*http.Request, *httptest.ResponseRecorder) {
	req := httptest.NewRequest(http.MethodGet, "http://example.com/api", nil)
	req.RemoteAddr = ip + ":1234"
	req.Header.Set("X-Key", key)
	rec := httptest.NewRecorder()
	req = caddyhttp.PrepareRequest(req, caddy.NewReplacer(), rec, nil)
	caddyhttp.SetVar(req.Context(), caddyhttp.ClientIPVarKey, ip)
	return req, rec
}

// BenchmarkServeHTTPRedisCPU is two zones on Redis, every request admitted,
// from 2×16 goroutines, each its own key: besides ns/op (wall time per
// request with 32 in flight) it reports cpu-ns/op, this process's CPU per
// request (the handler and the Redis client; Redis's own CPU is in another
// process). Caddy's "bare + N µs" is this N: a bare handler costs nothing
// here.
func BenchmarkServeHTTPRedisCPU(b *testing.B) {
	srv := redistest.Start(b)
	h := newHandler(b, twoZones(block("redis", "url "+srv.URL(), "timeout 1s")))
	benchParallelCPU(b, h, func(n int64) (*http.Request, *httptest.ResponseRecorder, func()) {
		req, rec := benchRequest("tenant-"+strconv.FormatInt(n, 10), "192.0.2."+strconv.FormatInt(n%250+1, 10))
		return req, rec, nil
	})
}

// benchParallelCPU runs h from 2×16 goroutines, the nth serving the
// request worker(n) prepares, after its before (nil: none) each time, and
// reports besides ns/op this process's CPU per request (cpu-ns/op): the
// handler and its Redis client, Redis's own CPU being another process's.
func benchParallelCPU(b *testing.B, h *Handler, worker func(n int64) (*http.Request, *httptest.ResponseRecorder, func())) {
	next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })
	var seq atomic.Int64
	b.SetParallelism(16)
	b.ReportAllocs()
	cpu0 := processCPU(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, rec, before := worker(seq.Add(1))
		for pb.Next() {
			if before != nil {
				before()
			}
			clear(rec.Header())
			if err := h.ServeHTTP(rec, req, next); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkFlood is one key over its limit, every request denied, against
// Caddy's own `error 429` (caddyhttp.StaticError) in the same run: the
// flood target is sluice ≥ 0.9× error429 throughput. On the embedded store
// every denial is decided; on Redis (make bench's flood system) the deny
// cache answers it.
func BenchmarkFlood(b *testing.B) {
	zone := func() string {
		return zoneCfg(uniqueZone("flood"), "key {http.request.header.X-Key}", "algorithm fixed_window", "events 1", "window 1h")
	}
	srv := redistest.Start(b)
	cases := []struct {
		name    string
		handler caddyhttp.MiddlewareHandler
	}{
		{"error429", caddyhttp.StaticError{StatusCode: "429"}},
		{"sluice/memory", newHandler(b, rateLimit(zone()))},
		{"sluice/redis", newHandler(b, rateLimit(block("redis", "url "+srv.URL(), "timeout 1s"), zone()))},
		// log_key: the top offenders count the expanded key, not its hash
		{"sluice/redis_log_key", newHandler(b, rateLimit(block("redis", "url "+srv.URL(), "timeout 1s"), "log_key", zone()))},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			req, rec := benchRequest("flooder", "192.0.2.9")
			admitted := 0
			next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { admitted++; return nil })
			_ = c.handler.ServeHTTP(rec, req, next) // takes the one event
			_ = c.handler.ServeHTTP(rec, req, next) // the first denial, cached on Redis
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				clear(rec.Header())
				_ = c.handler.ServeHTTP(rec, req, next) // the 429: Caddy's error, or Sluice's answer
			}
			if admitted > 1 {
				b.Fatalf("admitted %d, want 1 and then only 429s", admitted)
			}
		})
	}
}

// settlingZones is a rate_limit with a concurrency zone and a count_status
// zone that admit everything the benchmarks send (every response is 200,
// so count_status refunds each one), plus the given store block.
func settlingZones(store string) string {
	return fmt.Sprintf(`rate_limit {
	%s
	zone %s {
		key {http.vars.client_ip}
		algorithm concurrency
		events 1000000
	}
	zone %s {
		key {http.request.header.X-Key}
		algorithm fixed_window
		events 1000000000
		window 1h
		count_status 401
	}
}`, store, uniqueZone("bench_slot"), uniqueZone("bench_status"))
}

// BenchmarkServeHTTPSettling measures a request that settles after its
// response (a concurrency slot and a refund), settlement included: each
// iteration waits for the background settlement, so ns/op is the full
// cost.
func BenchmarkServeHTTPSettling(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		benchServe(b, newHandler(b, settlingZones("")))
		settling.Wait()
	})
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b)
		benchServe(b, newHandler(b, settlingZones("redis {\n\t\turl "+srv.URL()+"\n\t\ttimeout 1s\n\t}")))
		settling.Wait()
	})
}

// BenchmarkServeHTTPRedisColdKeys is one zone on Redis over 10^5 keys
// drawn at random, none hot enough to lease (bench/run.sh's "many keys"),
// with quota leases on (the default) and off, from 2×16 goroutines: its
// cpu-ns/op is this process's CPU per request, what leases cost a cold
// key on the handler's side.
func BenchmarkServeHTTPRedisColdKeys(b *testing.B) {
	srv := redistest.Start(b)
	const keys = 100_000
	values := make([][]string, keys)
	for i := range values {
		values[i] = []string{"tenant-" + strconv.Itoa(i)}
	}
	for _, lease := range []string{"250ms", "off"} {
		b.Run("quota_lease_"+lease, func(b *testing.B) {
			h := newHandler(b, rateLimit(block("redis", "url "+srv.URL(), "timeout 1s"),
				zoneCfg(uniqueZone("bench_cold"), "key {http.request.header.X-Key}", "algorithm fixed_window",
					"events 1000000000", "window 1m", "quota_lease "+lease)))
			benchParallelCPU(b, h, func(n int64) (*http.Request, *httptest.ResponseRecorder, func()) {
				req, rec := benchRequest("", "192.0.2.1")
				rnd := uint64(n) * 0x9E3779B97F4A7C15
				return req, rec, func() { // a key at random (xorshift)
					rnd ^= rnd << 13
					rnd ^= rnd >> 7
					rnd ^= rnd << 17
					req.Header["X-Key"] = values[rnd%keys]
				}
			})
		})
	}
}

// BenchmarkServeHTTPAdaptive compares an adaptive zone with a static
// concurrency zone on the embedded store, each alone and admitting every
// request (one in flight at a time): what taking and releasing a slot,
// its latency sample and its RateLimit member cost against a concurrency
// zone's slot taken and given back (settlement included: each
// sub-benchmark waits for it).
func BenchmarkServeHTTPAdaptive(b *testing.B) {
	b.Run("memory/concurrency", func(b *testing.B) {
		benchServe(b, newHandler(b, rateLimit(zoneCfg(uniqueZone("bench_conc"), "key static", "algorithm concurrency", "events 1000"))))
		settling.Wait()
	})
	b.Run("memory/adaptive", func(b *testing.B) {
		benchServe(b, newHandler(b, rateLimit(zoneCfg(uniqueZone("bench_shed"), "key static", "algorithm adaptive", "events 1000"))))
	})
	b.Run("memory/adaptive_classes", func(b *testing.B) {
		benchServe(b, newHandler(b, rateLimit(zoneCfg(uniqueZone("bench_shed"), "key static", "algorithm adaptive", "events 1000",
			"priority {http.request.header.X-Key} critical normal bulk"))))
	})
	b.Run("memory/adaptive_and_two_zones", func(b *testing.B) {
		benchServe(b, newHandler(b, rateLimit(
			zoneCfg(uniqueZone("bench_shed"), "key static", "algorithm adaptive", "events 1000"),
			zoneCfg(uniqueZone("bench_ip"), "key {http.vars.client_ip}", "algorithm token_bucket", "events 1000000", "window 1s"),
			zoneCfg(uniqueZone("bench_key"), "key {http.request.header.X-Key}", "algorithm fixed_window", "events 1000000000", "window 1h"),
		)))
	})
}
