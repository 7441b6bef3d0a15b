package integration_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestOverrideAcrossInstances: two Caddy instances on one Redis. A key
// exhausted on B (whose denials a plain zone would cache) gets a higher
// limit through A (the `caddy rate-limit limit` CLI): B admits the extra
// requests at once, its headers and admin API show the override; clearing
// it through A's admin API restores the zone's limit on B. A zone without
// overrides answers PUT …/limit with 409 naming the option.
func TestOverrideAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	site := `	rate_limit {
` + redisBlock(srv, "timeout 5s") + `		failure_mode closed
		headers legacy x
		zone ov {
			match path /ov
			key {http.request.header.X-Key}
			algorithm fixed_window
			events 3
			window 1h
			overrides
		}
		zone plain {
			match path /plain
			key {http.request.header.X-Key}
			algorithm fixed_window
			events 3
			window 1h
		}
	}
	respond "ok" 200`
	a := startCaddy(t, caddyConfig{Site: site})
	b := startCaddy(t, caddyConfig{Site: site})
	avoidHourBoundary(t)
	client := newClient(1)
	const key = "cust/1"
	keyURL := func(c *caddyProc, zone string) string {
		return c.AdminURL + "/rate_limit/zones/" + zone + "/keys/" + url.PathEscape(key)
	}
	type state struct {
		Limit     int64 `json:"limit"`
		Remaining int64 `json:"remaining"`
		Override  bool  `json:"override"`
	}
	stateOn := func(c *caddyProc) state {
		t.Helper()
		status, body := adminDo(t, http.MethodGet, keyURL(c, "ov"), "", nil)
		var s state
		if err := json.Unmarshal([]byte(body), &s); status != http.StatusOK || err != nil {
			t.Fatalf("GET key: %d %s (%v)", status, body, err)
		}
		return s
	}

	if got, want := statuses(t, client, b.URL+"/ov", 5, "X-Key", key), wantStatuses(3, 2, http.StatusTooManyRequests); !slices.Equal(got, want) {
		t.Fatalf("B before the override: statuses %v, want %v", got, want)
	}
	res := rateLimitCLI(t, "limit", "ov", key, "6", "--address", strings.TrimPrefix(a.AdminURL, "http://"))
	if res.Code != 0 {
		t.Fatalf("caddy rate-limit limit: exit %d, stdout %q, stderr %s", res.Code, res.Stdout, res.Stderr)
	}
	r := get(t, client, b.URL+"/ov", "X-Key", key)
	if r.Status != http.StatusOK || r.Header.Get("X-RateLimit-Limit") != "6" || r.Header.Get("RateLimit-Limit") != "6" {
		t.Fatalf("B right after the override: status %d, X-RateLimit-Limit %q, want 200 and 6", r.Status, r.Header.Get("X-RateLimit-Limit"))
	}
	if got, want := statuses(t, client, b.URL+"/ov", 3, "X-Key", key), wantStatuses(2, 1, http.StatusTooManyRequests); !slices.Equal(got, want) {
		t.Errorf("B under the override of 6: statuses %v, want %v", got, want)
	}
	if s := stateOn(b); !s.Override || s.Limit != 6 || s.Remaining != 0 {
		t.Errorf("GET on B: %+v, want override, limit 6, remaining 0", s)
	}
	_, zones := adminDo(t, http.MethodGet, a.AdminURL+"/rate_limit/zones", "", nil)
	if !strings.Contains(zones, `"overrides":true`) {
		t.Errorf("zones: %s, want \"overrides\":true for ov", zones)
	}

	if status, body := adminDo(t, http.MethodDelete, keyURL(a, "ov")+"/limit", "", nil); status != http.StatusNoContent {
		t.Fatalf("DELETE …/limit on A: %d %s", status, body)
	}
	if s := stateOn(b); s.Override || s.Limit != 3 {
		t.Errorf("GET on B after DELETE: %+v, want the zone's limit 3, no override", s)
	}
	if r := get(t, client, b.URL+"/ov", "X-Key", key); r.Status != http.StatusTooManyRequests || r.Header.Get("X-RateLimit-Limit") != "3" {
		t.Errorf("B after DELETE: status %d, X-RateLimit-Limit %q, want 429 and 3", r.Status, r.Header.Get("X-RateLimit-Limit"))
	}

	// raised again, for an hour, through the admin API: B admits at once
	if status, body := adminDo(t, http.MethodPut, keyURL(a, "ov")+"/limit", "application/json", []byte(`{"events":10,"expires_in":"1h"}`)); status != http.StatusNoContent {
		t.Fatalf("PUT on A: %d %s", status, body)
	}
	if r := get(t, client, b.URL+"/ov", "X-Key", key); r.Status != http.StatusOK {
		t.Errorf("B after PUT of 10: status %d, want 200", r.Status)
	}

	status, body := adminDo(t, http.MethodPut, keyURL(a, "plain")+"/limit", "application/json", []byte(`{"events":10}`))
	if status != http.StatusConflict || !strings.Contains(body, "overrides") {
		t.Errorf("PUT on a zone without overrides: %d %s, want 409 naming overrides", status, body)
	}
}
