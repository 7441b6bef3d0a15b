package sluice

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

func TestOverridesOption(t *testing.T) {
	h, err := parse(t, rateLimit(zoneCfg("api", "key {remote_host}", "events 10", "window 1m", "overrides")))
	if err != nil {
		t.Fatal(err)
	}
	if !h.Zones["api"].Overrides {
		t.Fatal("overrides: not set")
	}
	if encoded := toJSON(t, h); !strings.Contains(encoded, `"overrides":true`) {
		t.Errorf("JSON %s lacks \"overrides\":true", encoded)
	}
	if _, err := parse(t, rateLimit(zoneCfg("api", "key {remote_host}", "events 10", "window 1m", "overrides yes"))); err == nil {
		t.Error("overrides with an argument: parsed")
	}
	plain, _ := parse(t, rateLimit(zoneCfg("api", "key {remote_host}", "events 10", "window 1m")))
	if encoded := toJSON(t, plain); strings.Contains(encoded, "overrides") {
		t.Errorf("a zone without overrides: JSON %s names them", encoded)
	}
}

func TestZonesAgreeOnOverrides(t *testing.T) {
	mk := func(overrides bool) *Zone {
		z := &Zone{Key: "k", MaxEvents: 3, Window: caddy.Duration(time.Minute), Overrides: overrides}
		if err := z.setup("agree"); err != nil {
			t.Fatal(err)
		}
		return z
	}
	if err := agree(mk(true), mk(true)); err != nil {
		t.Errorf("same: %v", err)
	}
	if err := agree(mk(true), mk(false)); err == nil || !strings.Contains(err.Error(), "overrides on here, off in another") {
		t.Errorf("one with overrides, one without: %v", err)
	}
}

// TestServeOverride: on the memory store, a key's override set through
// the admin API applies at once, wins over a per-request limit, and the
// headers show it; clearing it restores the request's limit.
func TestServeOverride(t *testing.T) {
	name := fmt.Sprintf("srv_ov_%d", rand.Int64())
	h := newHandler(t, rateLimit("headers ietf legacy x", zoneCfg(name,
		"key {http.request.header.X-Customer}", "events {http.request.header.X-Limit} 2", "window 1m", "overrides")))
	o := reqOpts{headers: map[string]string{"X-Customer": "acme", "X-Limit": "3"}}
	for i := range 3 {
		if res := serve(t, h, o); !res.allowed() {
			t.Fatalf("request %d: denied", i+1)
		}
	}
	if res := serve(t, h, o); res.allowed() {
		t.Fatal("request 4: admitted under a limit of 3")
	}
	if code, msg := adminDo(t, http.MethodPut, "/rate_limit/zones/"+name+"/keys/acme/limit", `{"events":5}`); code != http.StatusNoContent {
		t.Fatalf("PUT: %d %s", code, msg)
	}
	res := serve(t, h, o)
	if !res.allowed() {
		t.Fatal("after PUT: denied")
	}
	for field, want := range map[string]string{"RateLimit-Limit": "5", "X-RateLimit-Limit": "5", "RateLimit-Remaining": "1"} {
		if got := res.header(field); got != want {
			t.Errorf("%s: got %q, want %q", field, got, want)
		}
	}
	if got := res.header("RateLimit-Policy"); !strings.Contains(got, ";q=5;") {
		t.Errorf("RateLimit-Policy %q: want q=5", got)
	}
	serve(t, h, o)
	if res := serve(t, h, o); res.allowed() {
		t.Fatal("request 7: admitted under an override of 5")
	}
	if code, msg := adminDo(t, http.MethodDelete, "/rate_limit/zones/"+name+"/keys/acme/limit", ""); code != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", code, msg)
	}
	res = serve(t, h, o)
	if res.allowed() || res.header("X-RateLimit-Limit") != "3" {
		t.Errorf("after DELETE: allowed=%v limit %q, want denied under the request's 3", res.allowed(), res.header("X-RateLimit-Limit"))
	}
}

// TestLocalFallbackIgnoresOverrides: failure_mode local decides with this
// instance's counters, which know no overrides (they live in Redis):
// while Redis is down an overridden key gets the request's own limit (the
// zone's events, or its placeholder's), as docs/operations.md says.
func TestLocalFallbackIgnoresOverrides(t *testing.T) {
	srv := redistest.Start(t)
	name := uniqueZone("local_ov")
	h := newHandler(t, rateLimit(block("redis", "url "+srv.URL(), "timeout 200ms"), "failure_mode local", "headers x",
		zoneCfg(name, "key {http.request.header.X-Customer}", "events {http.request.header.X-Limit} 2", "window 1h", "overrides")))
	tests := []struct {
		customer, limit string // X-Customer, X-Limit
		want            string // X-RateLimit-Limit while Redis is down
		admit           int
	}{
		{"acme", "", "2", 2},  // the zone's events
		{"beta", "3", "3", 3}, // the request's own
	}
	opts := func(customer, limit string) reqOpts {
		return reqOpts{headers: map[string]string{"X-Customer": customer, "X-Limit": limit}}
	}
	for _, tt := range tests {
		if code, msg := adminDo(t, http.MethodPut, "/rate_limit/zones/"+name+"/keys/"+tt.customer+"/limit", `{"events":50}`); code != http.StatusNoContent {
			t.Fatalf("PUT: %d %s", code, msg)
		}
		if res := serve(t, h, opts(tt.customer, tt.limit)); !res.allowed() || res.header("X-RateLimit-Limit") != "50" {
			t.Fatalf("%s, Redis up: allowed %v, limit %q; want the override's 50", tt.customer, res.allowed(), res.header("X-RateLimit-Limit"))
		}
	}
	srv.Stop()
	for _, tt := range tests {
		for i := range tt.admit + 1 {
			res := serve(t, h, opts(tt.customer, tt.limit))
			if got := res.header("X-RateLimit-Limit"); got != tt.want || res.allowed() != (i < tt.admit) {
				t.Errorf("%s, Redis down, request %d: allowed %v, limit %q; want limit %s, %d admitted",
					tt.customer, i+1, res.allowed(), got, tt.want, tt.admit)
			}
		}
	}
}

// TestServeOverrideCostCap: an override raises a key's cost cap with its
// capacity, on the memory store and on Redis: in a zone of events 10 with
// a cost from a header, a key overridden to 1000 spends 11 in one request
// (q=1000, r=989) and is refused 1001 with the override's limit and a
// window's Retry-After; a key without one is still capped at 10.
func TestServeOverrideCostCap(t *testing.T) {
	srv := redistest.Start(t)
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			name := fmt.Sprintf("srv_ovcap_%d", rand.Int64())
			zone := zoneCfg(name, "key {http.request.header.X-Customer}", "events 10", "window 1m", "overrides", "cost {http.request.header.X-Cost}")
			cfg := rateLimit("headers ietf", zone)
			if store == "redis" {
				cfg = rateLimit("headers ietf", block("redis", "url "+srv.URL()), zone)
			}
			h := newHandler(t, cfg)
			if code, msg := adminDo(t, http.MethodPut, "/rate_limit/zones/"+name+"/keys/big/limit", `{"events":1000}`); code != http.StatusNoContent {
				t.Fatalf("PUT: %d %s", code, msg)
			}
			send := func(customer, cost string) result {
				return serve(t, h, reqOpts{headers: map[string]string{"X-Customer": customer, "X-Cost": cost}})
			}
			tests := []struct {
				customer, cost string
				allowed        bool
				policy, limit  string // in RateLimit-Policy and RateLimit
				retry          string
			}{
				{"big", "11", true, ";q=1000;", ";r=989;", ""},
				{"big", "1001", false, ";q=1000;", ";r=1000;", "60"}, // never passes: nothing read
				{"small", "11", false, ";q=10;", ";r=10;", "60"},
			}
			for _, tt := range tests {
				res := send(tt.customer, tt.cost)
				if res.allowed() != tt.allowed || !strings.Contains(res.header("RateLimit-Policy"), tt.policy) ||
					!strings.Contains(res.header("RateLimit")+";", tt.limit) || res.header("Retry-After") != tt.retry {
					t.Errorf("%s cost %s: got allowed=%v RateLimit-Policy %q RateLimit %q Retry-After %q, want %v %s %s %q",
						tt.customer, tt.cost, res.allowed(), res.header("RateLimit-Policy"), res.header("RateLimit"),
						res.header("Retry-After"), tt.allowed, tt.policy, tt.limit, tt.retry)
				}
			}
		})
	}
}
