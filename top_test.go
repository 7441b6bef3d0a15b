package sluice

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
	"github.com/sluicehq/caddy-sluice/redisstore"
)

// serveKey sends one request with X-Key key to h and reports whether it
// was denied.
func serveKey(t *testing.T, h *Handler, key string) bool {
	t.Helper()
	req, rec := benchRequest(key, "192.0.2.1")
	next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })
	err := h.ServeHTTP(rec, req, next)
	return err != nil || rec.Code != http.StatusOK // a rejection is answered inside the handler
}

// getTop reads GET …/top?query of zone.
func getTop(t *testing.T, zone, query string) []topKey {
	t.Helper()
	code, body := adminDo(t, http.MethodGet, "/rate_limit/zones/"+zone+"/top"+query, "")
	if code != http.StatusOK {
		t.Fatalf("GET top%s: %d %s", query, code, body)
	}
	var top []topKey
	if err := json.Unmarshal([]byte(body), &top); err != nil {
		t.Fatalf("GET top%s: %v in %s", query, err, body)
	}
	return top
}

// floodZone is a zone keyed by X-Key that admits one request per hour.
func floodZone(name string, extra ...string) string {
	return zoneCfg(name, append([]string{"key {http.request.header.X-Key}", "algorithm fixed_window", "events 1", "window 1h"}, extra...)...)
}

// TestTopCountsDenials: in memory, the endpoint ranks the keys by their
// denials (admissions and dry-run denials not counted), by store-key hash
// without log_key.
func TestTopCountsDenials(t *testing.T) {
	name, dry := uniqueZone("top_mem"), uniqueZone("top_dry")
	h := newHandler(t, rateLimit(floodZone(name), floodZone(dry, "dry_run")))
	for range 6 { // 1 admitted, 5 denied
		serveKey(t, h, "noisy")
	}
	for range 3 { // 1 admitted, 2 denied
		serveKey(t, h, "quiet")
	}
	serveKey(t, h, "once") // admitted
	top := getTop(t, name, "")
	hash := func(key string) string { return keyHash(h.zones[1].storeKey(key)) }
	if h.zones[1].name != name {
		t.Fatalf("zones in order: %s, want %s second", h.zones[1].name, name)
	}
	want := []topKey{{hash("noisy"), 5}, {hash("quiet"), 2}}
	if len(top) != 2 || top[0] != want[0] || top[1] != want[1] {
		t.Errorf("top: got %+v, want %+v", top, want)
	}
	if got := getTop(t, dry, ""); len(got) != 0 {
		t.Errorf("dry-run zone: got %+v, want no key (dry-run denials are not counted)", got)
	}
	if got := getTop(t, name, "?n=1"); len(got) != 1 || got[0] != want[0] {
		t.Errorf("n=1: got %+v, want %+v", got, want[:1])
	}
}

// TestTopLogKey: with log_key, the endpoint shows the expanded key.
func TestTopLogKey(t *testing.T) {
	name := uniqueZone("top_raw")
	h := newHandler(t, rateLimit("log_key", floodZone(name)))
	for range 4 {
		serveKey(t, h, "tenant-7")
	}
	if got := getTop(t, name, ""); len(got) != 1 || got[0] != (topKey{"tenant-7", 3}) {
		t.Errorf("top: got %+v, want [{tenant-7 3}]", got)
	}
}

// TestTopN: n defaults to 10, at most 100; a bad n is a 400, an unknown
// zone a 404, a method other than GET a 405.
func TestTopN(t *testing.T) {
	name := uniqueZone("top_n")
	h := newHandler(t, rateLimit(floodZone(name)))
	for i := range 120 {
		key := "k" + strings.Repeat("x", i)
		for range 2 + i%3 {
			serveKey(t, h, key)
		}
	}
	if got := len(getTop(t, name, "")); got != 10 {
		t.Errorf("default n: %d keys, want 10", got)
	}
	if got := len(getTop(t, name, "?n=100")); got != 100 {
		t.Errorf("n=100: %d keys, want 100", got)
	}
	top := getTop(t, name, "?n=50")
	for i := 1; i < len(top); i++ {
		if top[i].Denied > top[i-1].Denied {
			t.Fatalf("not sorted by denied descending: %+v", top)
		}
	}
	for _, q := range []string{"?n=0", "?n=101", "?n=-1", "?n=ten", "?n=1.5"} {
		if code, body := adminDo(t, http.MethodGet, "/rate_limit/zones/"+name+"/top"+q, ""); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", q, code, body)
		}
	}
	if code, _ := adminDo(t, http.MethodGet, "/rate_limit/zones/no-such-zone/top", ""); code != http.StatusNotFound {
		t.Errorf("unknown zone: %d, want 404", code)
	}
	if code, _ := adminDo(t, http.MethodDelete, "/rate_limit/zones/"+name+"/top", ""); code != http.StatusMethodNotAllowed {
		t.Errorf("DELETE: %d, want 405", code)
	}
}

// TestTopCountsCachedDenials: on Redis, the denials the deny cache answers
// are counted (that is where a flood goes), and the endpoint adds this
// instance's counts not yet flushed to Redis's; after a flush, Redis has
// them and the sketch is empty, and the endpoint shows the same.
func TestTopCountsCachedDenials(t *testing.T) {
	srv := redistest.Start(t)
	name := uniqueZone("top_redis")
	h := newHandler(t, rateLimit(block("redis", "url "+srv.URL(), "timeout 1s"), floodZone(name)))
	for range 50 {
		serveKey(t, h, "flooder")
	}
	z := h.zones[0]
	if got := z.top.pending.Len(); got != 1 {
		t.Fatalf("pending keys: %d, want 1", got)
	}
	want := []topKey{{keyHash(z.storeKey("flooder")), 49}}
	check := func(when string) {
		t.Helper()
		if got := getTop(t, name, ""); len(got) != 1 || got[0] != want[0] {
			t.Errorf("%s: got %+v, want %+v", when, got, want)
		}
	}
	check("before the flush")
	shared, ok := sharedOf(h)
	if !ok {
		t.Fatal("no shared client")
	}
	shared.flushTopOnce(context.Background(), shared.topZones(), h.logger)
	if got := z.top.pending.Len(); got != 0 {
		t.Errorf("pending keys after the flush: %d, want 0", got)
	}
	check("after the flush")
	if hits := testutil.ToFloat64(z.metrics.denyCacheHits); hits == 0 {
		t.Errorf("no denial came from the deny cache: the test does not test it")
	}
}

// sharedOf is h's shared Redis client.
func sharedOf(h *Handler) (*sharedClient, bool) {
	var found *sharedClient
	clients.Range(func(key, val any) bool {
		if key == h.client {
			found, _ = val.(*sharedClient)
			return false
		}
		return true
	})
	return found, found != nil
}

// TestTopCountsBans: the keys a ban stopped are top offenders. Every
// banned request counts as a denial of its key: the trip, those the deny
// cache answers, and those Redis answers (the cache forgot the ban); in
// memory too.
func TestTopCountsBans(t *testing.T) {
	srv := redistest.Start(t)
	for _, tt := range []struct {
		name  string
		redis string
	}{
		{"memory", ""},
		{"redis", block("redis", "url "+srv.URL(), "timeout 1s")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			name := uniqueZone("top_ban_" + tt.name)
			h := newHandler(t, rateLimit(tt.redis, floodZone(name, "ban 1h")))
			for range 5 { // 1 admitted, the trip, 3 banned
				serveKey(t, h, "banned-key")
			}
			z := h.zones[0]
			if shared, ok := sharedOf(h); ok {
				shared.stores.cache.Forget(z.storeKey("banned-key"))
				serveKey(t, h, "banned-key") // banned, answered by Redis
			}
			want := []topKey{{keyHash(z.storeKey("banned-key")), 4}}
			if tt.redis != "" {
				want[0].Denied = 5
			}
			if got := testutil.ToFloat64(z.metrics.outcomes[outcomeBanned]); got != float64(want[0].Denied) {
				t.Fatalf("outcome banned: %v, want %d: the test does not test bans", got, want[0].Denied)
			}
			if got := getTop(t, name, ""); len(got) != 1 || got[0] != want[0] {
				t.Errorf("top: got %+v, want %+v", got, want)
			}
		})
	}
}

// TestTopFlushedAtCleanup: an instance that stops (its config's context
// canceled: Cleanup releases the shared client for the last time) adds
// its zones' top counts to Redis before Cleanup returns, within the
// first flush interval too, before any tick knew the zone.
func TestTopFlushedAtCleanup(t *testing.T) {
	srv := redistest.Start(t)
	name := uniqueZone("top_stop")
	ctx, cancel := caddy.NewContext(testContext(t))
	h := newHandlerIn(t, ctx, rateLimit(block("redis", "url "+srv.URL(), "timeout 1s"), floodZone(name)))
	for range 8 { // 1 admitted, 7 denied
		serveKey(t, h, "leaver")
	}
	want := []algorithms.Counted{{Key: keyHash(h.zones[0].storeKey("leaver")), Count: 7}}
	cancel()
	sets := redisstore.TopSets{Client: srv.Client(t), Prefix: defaultKeyPrefix, Zone: name}
	got, err := sets.Read(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != want[0] {
		t.Errorf("top counts in Redis once Cleanup returned: got %+v, want %+v", got, want)
	}
}

// TestTopGuaranteedCounts: under a flood of more distinct keys than the
// sketch tracks, keys denied once take the place of others and inherit
// their counts; the endpoint shows what each key surely had, never an
// inherited count as its own: the heavy key its 10 denials, every one-shot
// key at most 1. On Redis the flushes carry those counts.
func TestTopGuaranteedCounts(t *testing.T) {
	srv := redistest.Start(t)
	for _, tt := range []struct {
		name  string
		redis string
	}{
		{"memory", ""},
		{"redis", block("redis", "url "+srv.URL(), "timeout 1s")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			name := uniqueZone("top_bound_" + tt.name)
			h := newHandler(t, rateLimit("log_key", tt.redis, floodZone(name)))
			for range 11 { // 1 admitted, 10 denied
				serveKey(t, h, "heavy")
			}
			for i := range algorithms.DefaultTopKeys + 44 { // each 1 admitted, 1 denied
				for range 2 {
					serveKey(t, h, fmt.Sprintf("once-%d", i))
				}
			}
			if shared, ok := sharedOf(h); ok {
				shared.flushTopOnce(context.Background(), shared.topZones(), h.logger)
			}
			top := getTop(t, name, "?n=100")
			if len(top) == 0 || top[0] != (topKey{"heavy", 10}) {
				t.Fatalf("top: got %+v, want heavy with 10 first", top)
			}
			for _, k := range top[1:] {
				if k.Denied != 1 {
					t.Errorf("%s: %d denials shown, want 1 (its true count)", k.Key, k.Denied)
				}
			}
		})
	}
}

// TestTopLastFlushLeavesMovedZones: a reload moves a zone to other Redis
// settings; the old client's last flush leaves the zone's counts to the
// client that now holds it, whose Redis the admin API reads.
func TestTopLastFlushLeavesMovedZones(t *testing.T) {
	before, after := redistest.Start(t), redistest.Start(t)
	name := uniqueZone("top_moved")
	ctx, cancel := caddy.NewContext(testContext(t))
	old := newHandlerIn(t, ctx, rateLimit(block("redis", "url "+before.URL(), "timeout 1s"), floodZone(name)))
	for range 4 { // 1 admitted, 3 denied
		serveKey(t, old, "mover")
	}
	h := newHandler(t, rateLimit(block("redis", "url "+after.URL(), "timeout 1s"), floodZone(name)))
	cancel() // the old config is cleaned up: its client's last flush
	read := func(srv *redistest.Server) []algorithms.Counted {
		t.Helper()
		got, err := redisstore.TopSets{Client: srv.Client(t), Prefix: defaultKeyPrefix, Zone: name}.Read(context.Background(), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := read(before); len(got) != 0 {
		t.Errorf("the old Redis got the moved zone's counts: %+v", got)
	}
	shared, ok := sharedOf(h)
	if !ok {
		t.Fatal("no shared client")
	}
	shared.flushTopOnce(context.Background(), shared.topZones(), h.logger)
	want := algorithms.Counted{Key: keyHash(h.zones[0].storeKey("mover")), Count: 3}
	if got := read(after); len(got) != 1 || got[0] != want {
		t.Errorf("the new Redis: got %+v, want [%+v]", got, want)
	}
}
