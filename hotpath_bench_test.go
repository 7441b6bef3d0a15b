package sluice

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

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
	next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })
	var seq atomic.Int64
	b.SetParallelism(16)
	b.ReportAllocs()
	cpu0 := processCPU(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		n := seq.Add(1)
		req, rec := benchRequest("tenant-"+strconv.FormatInt(n, 10), "192.0.2."+strconv.FormatInt(n%250+1, 10))
		for pb.Next() {
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
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			req, rec := benchRequest("flooder", "192.0.2.9")
			next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })
			_ = c.handler.ServeHTTP(rec, req, next) // takes the one event
			_ = c.handler.ServeHTTP(rec, req, next) // the first denial, cached on Redis
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				clear(rec.Header())
				if err := c.handler.ServeHTTP(rec, req, next); err == nil {
					b.Fatal("admitted, want a 429 error")
				}
			}
		})
	}
}
