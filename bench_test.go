package sluice

import (
	"net/http"
	"net/http/httptest"
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
// is the handler's decision path, not request setup.
func benchServe(b *testing.B, h *Handler) {
	req := httptest.NewRequest(http.MethodGet, "http://example.com/api", nil)
	req.RemoteAddr = "192.0.2.1:1234"
	req.Header.Set("X-Key", "tenant-42")
	rec := httptest.NewRecorder()
	req = caddyhttp.PrepareRequest(req, caddy.NewReplacer(), rec, nil)
	caddyhttp.SetVar(req.Context(), caddyhttp.ClientIPVarKey, "192.0.2.1")
	next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		clear(rec.Header())
		if err := h.ServeHTTP(rec, req, next); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkServeHTTP(b *testing.B) {
	b.Run("memory/two_zones", func(b *testing.B) {
		benchServe(b, newHandler(b, twoZones("")))
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
		(styleIETF | styleLegacy | styleX).write(h, zones, ds, now)
	}
}
