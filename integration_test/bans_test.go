package integration_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestBansAcrossInstances: two Caddy instances on one Redis. A trip on A
// bans the key on B (429, Retry-After the ban's remaining time, r=0,
// nothing consumed in the request's other zone, the banned metric, B's
// deny cache answering the flood, banned_seconds in the admin API); a
// short ban ends by itself; admin DELETE on A lifts a long ban at once on
// both A and B (B's cached denial included).
func TestBansAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	site := `	rate_limit {
` + redisBlock(srv, "timeout 5s") + `		failure_mode closed
		zone long {
			match path /long
			key {http.request.header.X-Key}
			algorithm token_bucket
			events 3
			window 1s
			ban 1h
		}
		zone short {
			match path /short
			key {http.request.header.X-Key}
			algorithm token_bucket
			events 3
			window 1s
			ban 2s
		}
		zone site {
			key {http.request.header.X-Key}
			events 1000
			window 1h
		}
	}
	respond "ok" 200`
	a := startCaddy(t, caddyConfig{Site: site})
	b := startCaddy(t, caddyConfig{Site: site})
	client := newClient(1)
	keyURL := func(c *caddyProc, zone, key string) string {
		return c.AdminURL + "/rate_limit/zones/" + zone + "/keys/" + url.PathEscape(key)
	}
	type state struct {
		Remaining     int64  `json:"remaining"`
		BannedSeconds *int64 `json:"banned_seconds"`
	}
	stateOn := func(c *caddyProc, zone, key string) state {
		t.Helper()
		status, body := adminDo(t, http.MethodGet, keyURL(c, zone, key), "", nil)
		var s state
		if err := json.Unmarshal([]byte(body), &s); status != http.StatusOK || err != nil {
			t.Fatalf("GET %s/%s: %d %s (%v)", zone, key, status, body, err)
		}
		return s
	}
	// trip sends requests for key to path on c until one is rejected (the
	// trip), and returns how many were admitted.
	trip := func(c *caddyProc, path, key string) int {
		t.Helper()
		for i := range 50 {
			if r := get(t, client, c.URL+path, "X-Key", key); r.Status == http.StatusTooManyRequests {
				return i
			}
		}
		t.Fatalf("%s on %s: never rejected", path, c.URL)
		return 0
	}

	// a trip on A bans the key on B
	const key = "mallory"
	admitted := trip(a, "/long", key)
	siteLeft := stateOn(b, "site", key).Remaining
	if want := int64(1000 - admitted); siteLeft != want {
		t.Errorf("site zone after %d admitted and the trip: remaining %d, want %d (the trip consumed nothing)", admitted, siteLeft, want)
	}
	for i := range 3 {
		r := get(t, client, b.URL+"/long", "X-Key", key)
		retry, _ := strconv.Atoi(r.Header.Get("Retry-After"))
		if r.Status != http.StatusTooManyRequests || retry < 3590 || retry > 3600 {
			t.Fatalf("B, request %d under A's ban: status %d, Retry-After %q, want 429 and about 3600", i+1, r.Status, r.Header.Get("Retry-After"))
		}
		if rl := r.Header.Get("RateLimit"); !strings.Contains(rl, `"long";r=0`) {
			t.Errorf("B, request %d: RateLimit %q, want \"long\";r=0", i+1, rl)
		}
	}
	if got := stateOn(b, "site", key).Remaining; got != siteLeft {
		t.Errorf("site zone after banned requests on B: remaining %d, want %d (nothing consumed)", got, siteLeft)
	}
	if s := stateOn(b, "long", key); s.BannedSeconds == nil || *s.BannedSeconds < 3590 {
		t.Errorf("GET long/%s on B: banned_seconds %v, want about 3600", key, s.BannedSeconds)
	}
	if got := metricValue(t, b, `caddy_rate_limit_decisions_total{outcome="banned",zone="long"}`); got != 3 {
		t.Errorf("B's banned decisions: got %v, want 3", got)
	}
	if got := metricValue(t, b, `caddy_rate_limit_deny_cache_hits_total{zone="long"}`); got < 2 {
		t.Errorf("B's deny cache hits: got %v, want at least 2 (a banned flood costs Redis nothing)", got)
	}
	if got := metricValue(t, a, `caddy_rate_limit_decisions_total{outcome="banned",zone="long"}`); got != 1 {
		t.Errorf("A's banned decisions (the trip): got %v, want 1", got)
	}
	_, zones := adminDo(t, http.MethodGet, a.AdminURL+"/rate_limit/zones", "", nil)
	if !strings.Contains(zones, `"ban":3600`) || !strings.Contains(zones, `"ban":2`) {
		t.Errorf("zones: %s, want \"ban\":3600 and \"ban\":2", zones)
	}

	// admin DELETE on A lifts the ban at once, on A and on B (whose deny
	// cache holds it for an hour)
	if status, body := adminDo(t, http.MethodDelete, keyURL(a, "long", key), "", nil); status != http.StatusNoContent {
		t.Fatalf("DELETE on A: %d %s", status, body)
	}
	lifted := time.Now()
	for _, c := range []*caddyProc{b, a} {
		for {
			r := get(t, client, c.URL+"/long", "X-Key", key)
			if r.Status == http.StatusOK {
				break
			}
			if time.Since(lifted) > 3*time.Second {
				t.Fatalf("%s 3s after DELETE on A: status %d, Retry-After %q, want the ban lifted", c.URL, r.Status, r.Header.Get("Retry-After"))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if s := stateOn(b, "long", key); s.BannedSeconds == nil || *s.BannedSeconds != 0 {
		t.Errorf("GET long/%s on B after DELETE: banned_seconds %v, want 0", key, s.BannedSeconds)
	}

	// a short ban ends by itself, on B too
	const other = "eve"
	trip(a, "/short", other)
	tripped := time.Now()
	if r := get(t, client, b.URL+"/short", "X-Key", other); r.Status != http.StatusTooManyRequests {
		t.Fatalf("B under the 2s ban: status %d, want 429", r.Status)
	}
	for {
		r := get(t, client, b.URL+"/short", "X-Key", other)
		if r.Status == http.StatusOK {
			break
		}
		if time.Since(tripped) > 10*time.Second {
			t.Fatalf("B 10s after a 2s ban: status %d, want it ended", r.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if elapsed := time.Since(tripped); elapsed < 1500*time.Millisecond {
		t.Errorf("the 2s ban ended after %v on B, want about 2s", elapsed)
	}
}
