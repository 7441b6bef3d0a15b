package sluice

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

func TestBanOption(t *testing.T) {
	h, err := parse(t, rateLimit(zoneCfg("api", "key {remote_host}", "events 10", "window 1m", "ban 1h")))
	if err != nil {
		t.Fatal(err)
	}
	if got := time.Duration(h.Zones["api"].Ban); got != time.Hour {
		t.Fatalf("ban: got %v, want 1h", got)
	}
	if encoded := toJSON(t, h); !strings.Contains(encoded, `"ban":3600000000000`) {
		t.Errorf("JSON %s lacks \"ban\"", encoded)
	}
	var fromJSON Zone
	if err := json.Unmarshal([]byte(`{"key":"k","max_events":1,"window":"1m","ban":"90s"}`), &fromJSON); err != nil || time.Duration(fromJSON.Ban) != 90*time.Second {
		t.Errorf("JSON \"ban\":\"90s\": got %v (%v)", time.Duration(fromJSON.Ban), err)
	}
	for _, bad := range []string{"ban", "ban 0s", "ban -1s", "ban 500ms", "ban 367d", "ban soon", "ban 1h 2h"} {
		_, err := parse(t, rateLimit(zoneCfg("api", "key {remote_host}", "events 10", "window 1m", bad)))
		if err == nil || !strings.Contains(err.Error(), "ban") || !strings.Contains(err.Error(), "Testfile:") {
			t.Errorf("%q: got %v, want an error naming ban with file:line", bad, err)
		}
	}
	if _, err := parse(t, rateLimit(zoneCfg("api", "key {remote_host}", "events 10", "window 1m", "ban 1h", "ban 2h"))); err == nil {
		t.Error("ban repeated: parsed")
	}
	z := &Zone{Key: "k", MaxEvents: 3, Window: caddy.Duration(time.Minute), Ban: caddy.Duration(400 * time.Millisecond)}
	if err := z.setup("bad_ban"); err != nil {
		t.Fatal(err)
	}
	if err := z.validate(); err == nil || !strings.Contains(err.Error(), "ban") {
		t.Errorf("JSON ban 400ms: validate %v, want an error naming ban", err)
	}
}

func TestZonesAgreeOnBan(t *testing.T) {
	mk := func(ban time.Duration) *Zone {
		z := &Zone{Key: "k", MaxEvents: 3, Window: caddy.Duration(time.Minute), Ban: caddy.Duration(ban)}
		if err := z.setup("agree_ban"); err != nil {
			t.Fatal(err)
		}
		return z
	}
	if err := agree(mk(time.Hour), mk(time.Hour)); err != nil {
		t.Errorf("same: %v", err)
	}
	if err := agree(mk(time.Hour), mk(time.Minute)); err == nil || !strings.Contains(err.Error(), "ban") {
		t.Errorf("1h and 1m: %v", err)
	}
	if err := agree(mk(time.Hour), mk(0)); err == nil || !strings.Contains(err.Error(), "ban") {
		t.Errorf("one with a ban, one without: %v", err)
	}
}

// TestServeBan: on the memory store, the request a zone with a ban denies
// trips it: the event rate_limit_banned once (not per rejected request),
// the outcome banned for each banned request, Retry-After the ban's
// remaining time, nothing consumed in the request's other zone; the admin
// API shows banned_seconds and its DELETE lifts the ban.
func TestServeBan(t *testing.T) {
	zone, other := uniqueZone("ban"), uniqueZone("banother")
	h := newHandler(t, rateLimit(logZone(zone, 2, "1h", "ban 1h"), logZone(other, 100, "1h")))
	rec := new(eventRecorder)
	if err := h.events.On(bannedEvent, rec); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if res := serve(t, h, reqOpts{}); !res.allowed() {
			t.Fatalf("request %d: denied", i+1)
		}
	}
	for i := range 3 {
		res := serve(t, h, reqOpts{})
		wantDenied(t, res, http.StatusTooManyRequests)
		if got := retryAfter(t, res); got < 3599 || got > 3600 {
			t.Errorf("banned request %d: Retry-After %d, want 3600", i+1, got)
		}
		if got := remaining(t, res, zone); got != 0 {
			t.Errorf("banned request %d: %s r=%d, want 0", i+1, zone, got)
		}
		if got := remaining(t, res, other); got != 98 {
			t.Errorf("banned request %d: %s r=%d, want 98 (nothing consumed)", i+1, other, got)
		}
	}
	events := rec.forZone(zone)
	if len(events) != 1 {
		t.Fatalf("rate_limit_banned events: %d, want 1 (once per ban)", len(events))
	}
	if events[0]["ban_seconds"] != 3600.0 {
		t.Errorf("event ban_seconds: %v, want 3600", events[0]["ban_seconds"])
	}
	if _, ok := events[0]["key"]; ok {
		t.Errorf("event carries the key without log_key: %v", events[0])
	}
	z := h.zones[0]
	if z.name != zone {
		z = h.zones[1]
	}
	if got := testutilValue(t, z.metrics.outcomes[outcomeBanned]); got != 3 {
		t.Errorf("banned outcomes: %v, want 3", got)
	}
	if got := testutilValue(t, z.metrics.outcomes[outcomeDenied]); got != 0 {
		t.Errorf("denied outcomes: %v, want 0 (each was a ban)", got)
	}
	key := "192.0.2.1" // reqOpts' default client
	code, body := adminDo(t, http.MethodGet, "/rate_limit/zones/"+zone+"/keys/"+key, "")
	if code != http.StatusOK || !strings.Contains(body, `"banned_seconds":3600`) {
		t.Errorf("GET key: %d %s, want banned_seconds 3600", code, body)
	}
	if code, body := adminDo(t, http.MethodDelete, "/rate_limit/zones/"+zone+"/keys/"+key, ""); code != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	if res := serve(t, h, reqOpts{}); !res.allowed() {
		t.Fatal("after DELETE: denied, want the ban lifted")
	}
	if _, body := adminDo(t, http.MethodGet, "/rate_limit/zones/"+zone+"/keys/"+key, ""); !strings.Contains(body, `"banned_seconds":0`) {
		t.Errorf("GET key after DELETE: %s, want banned_seconds 0", body)
	}
}

// TestAdminBannedKeyResets: a banned key's reset_seconds is when its full
// quota is back: past its ban's end when its window ends later.
func TestAdminBannedKeyResets(t *testing.T) {
	zone := uniqueZone("banreset")
	h := newHandler(t, rateLimit(logZone(zone, 2, "1h", "ban 1m")))
	for range 3 { // two admitted, the third denied: banned for a minute
		serve(t, h, reqOpts{})
	}
	_, body := adminDo(t, http.MethodGet, "/rate_limit/zones/"+zone+"/keys/192.0.2.1", "")
	var got struct {
		Reset  int64 `json:"reset_seconds"`
		Banned int64 `json:"banned_seconds"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("GET key: %v: %s", err, body)
	}
	if got.Banned < 59 || got.Banned > 60 || got.Reset < 3599 || got.Reset > 3600 {
		t.Errorf("GET key: %s, want banned_seconds 60 and reset_seconds 3600 (the window's two entries)", body)
	}
}

// TestServeBanHandlerDryRun: a handler with dry_run never rejects, so its
// zones ban no one: the key's denials are dry-run denials, never banned.
func TestServeBanHandlerDryRun(t *testing.T) {
	zone := uniqueZone("bandry")
	h := newHandler(t, rateLimit("dry_run", logZone(zone, 1, "1h", "ban 1h")))
	for i := range 3 {
		if res := serve(t, h, reqOpts{}); !res.allowed() {
			t.Fatalf("request %d: not let through under dry_run", i+1)
		}
	}
	if got := testutilValue(t, h.zones[0].metrics.outcomes[outcomeBanned]); got != 0 {
		t.Errorf("banned outcomes under dry_run: %v, want 0", got)
	}
	_, body := adminDo(t, http.MethodGet, "/rate_limit/zones/"+zone+"/keys/192.0.2.1", "")
	if strings.Contains(body, `"banned_seconds":36`) {
		t.Errorf("GET key under dry_run: %s, want no ban", body)
	}
}

// TestRedisBanAskedOncePerInstance: the ban recipe's promise, counted on
// a real Redis: in a login zone that settles (count_status 401 403), has
// overrides, or both, the trip is the last decision Redis makes while the
// ban lasts; 20 banned requests after it make no script call and are
// refused for the ban's hour from the deny cache.
func TestRedisBanAskedOncePerInstance(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	calls := func() int64 { // Functions, or EVALSHA on Redis 6
		info := redistest.ReadInfo(t, rdb, "commandstats")
		return info.Stat("cmdstat_fcall", "calls") + info.Stat("cmdstat_evalsha", "calls") + info.Stat("cmdstat_eval", "calls")
	}
	for _, extra := range [][]string{{"count_status 401 403"}, {"overrides"}, {"count_status 401 403", "overrides"}} {
		t.Run(strings.Join(extra, "+"), func(t *testing.T) {
			zone := uniqueZone("login")
			lines := append([]string{"key {http.request.remote.host}", "algorithm sliding_log", "events 3", "window 15m", "ban 1h"}, extra...)
			h := newHandler(t, rateLimit(block("redis", "url "+srv.URL()), zoneCfg(zone, lines...)))
			waitSubscribed(t, h)
			for i := range 3 { // failed logins, counted
				if res := serveNext(t, h, respondWith(http.StatusUnauthorized)); res.next != 1 {
					t.Fatalf("login %d: refused (err %v)", i+1, res.err)
				}
			}
			if res := serveNext(t, h, respondWith(http.StatusUnauthorized)); res.next != 0 || res.header("Retry-After") != "3600" {
				t.Fatalf("the trip: got %d calls of next, Retry-After %q; want refused for 3600", res.next, res.header("Retry-After"))
			}
			before := calls()
			for i := range 20 {
				res := serveNext(t, h, respondWith(http.StatusUnauthorized))
				if retry := res.header("Retry-After"); res.next != 0 || (retry != "3600" && retry != "3599") {
					t.Fatalf("banned login %d: got %d calls of next, Retry-After %q; want refused for the ban", i+1, res.next, retry)
				}
			}
			if got := calls() - before; got != 0 {
				t.Errorf("script calls for 20 banned logins: %d, want 0 (the deny cache answers a ban)", got)
			}
			if got := testutilValue(t, h.zones[0].metrics.outcomes[outcomeBanned]); got != 21 {
				t.Errorf("banned outcomes: %v, want 21 (the trip and 20 cached)", got)
			}
		})
	}
}
