package sluice

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	maphandler "github.com/caddyserver/caddy/v2/modules/caddyhttp/map"
	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// Tests of limits per request: events <placeholder> <n> and burst
// <placeholder> <n> (docs/algorithms.md, "Limits per request").

func TestUnmarshalCaddyfileLimitPerRequest(t *testing.T) {
	h, err := parse(t, rateLimit(block("jwt", "secret s"), zoneCfg("z", "key k", "algorithm token_bucket", "events {jwt.plan_limit} 100", "window 1m", "burst {http.vars.burst} 150")))
	if err != nil {
		t.Fatal(err)
	}
	z := h.Zones["z"]
	if z.MaxEvents != 100 || z.EventsPlaceholder != "{jwt.plan_limit}" || z.Burst != 150 || z.BurstPlaceholder != "{http.vars.burst}" {
		t.Fatalf("parsed %+v", z)
	}
	raw := toJSON(t, h)
	for _, want := range []string{`"max_events":100`, `"events_placeholder":"{jwt.plan_limit}"`, `"burst":150`, `"burst_placeholder":"{http.vars.burst}"`} {
		if !strings.Contains(raw, want) {
			t.Errorf("JSON %s lacks %s", raw, want)
		}
	}
	// the plain forms are unchanged
	h, err = parse(t, zoneBlock("key k", "events 7", "window 1m"))
	if err != nil {
		t.Fatal(err)
	}
	if z := h.Zones["z"]; z.MaxEvents != 7 || z.EventsPlaceholder != "" || strings.Contains(toJSON(t, h), "placeholder") {
		t.Errorf("events 7 parsed as %s", toJSON(t, h))
	}
}

func TestValidateJSONLimitPerRequest(t *testing.T) {
	bad := map[string]string{
		"events_placeholder not a placeholder": `"key":"k","max_events":5,"window":1000000000,"events_placeholder":"plan"`,
		"burst_placeholder on sliding_window":  `"key":"k","max_events":5,"window":1000000000,"burst_placeholder":"{b}"`,
		"fallback 0":                           `"key":"k","window":1000000000,"events_placeholder":"{a}"`,
	}
	check := func(zone string) error {
		var z Zone
		if err := json.Unmarshal([]byte("{"+zone+"}"), &z); err != nil {
			t.Fatal(err)
		}
		if err := z.setup("z"); err != nil {
			return err
		}
		return z.validate()
	}
	for name, zone := range bad {
		if err := check(zone); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	good := `"key":"k","algorithm":"token_bucket","max_events":5,"window":1000000000,"events_placeholder":"{a}","burst_placeholder":"{b}"`
	if err := check(good); err != nil {
		t.Errorf("good: %v", err)
	}
}

// TestRequestLimit: a value that is empty, not a whole number, or out of
// range (for sliding_log, above 10,000) gives the fallback.
func TestRequestLimit(t *testing.T) {
	for _, tt := range []struct {
		algorithm, value string
		want             int64
	}{
		{"fixed_window", "10", 10},
		{"fixed_window", "1", 1},
		{"fixed_window", "1000000000", 1_000_000_000},
		{"fixed_window", "", 3},
		{"fixed_window", "pro", 3},
		{"fixed_window", "0", 3},
		{"fixed_window", "-5", 3},
		{"fixed_window", "1.5", 3},
		{"fixed_window", " 10", 3},
		{"fixed_window", "1000000001", 3},
		{"fixed_window", "99999999999999999999999", 3},
		{"sliding_log", "10000", 10_000},
		{"sliding_log", "10001", 3},
	} {
		z := &Zone{Key: "k", Algorithm: tt.algorithm, MaxEvents: 3, Window: caddy.Duration(time.Minute), EventsPlaceholder: "{http.vars.limit}"}
		if err := z.setup(uniqueZone("rl")); err != nil {
			t.Fatal(err)
		}
		repl := caddy.NewReplacer()
		repl.Set("http.vars.limit", tt.value)
		r := z.request(repl, "key", false)
		if r.Limit.Events != tt.want || r.Limit.Window != time.Minute {
			t.Errorf("%s %q: limit %v, want events %d", tt.algorithm, tt.value, r.Limit, tt.want)
		}
	}
	// burst: its own fallback, and the request's events when it has none
	z := &Zone{Key: "k", Algorithm: "token_bucket", MaxEvents: 3, Window: caddy.Duration(time.Minute),
		EventsPlaceholder: "{e}", BurstPlaceholder: "{b}"}
	if err := z.setup(uniqueZone("rl")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		e, b string
		want algorithms.Limit
	}{
		{"10", "20", algorithms.Limit{Events: 10, Burst: 20}},
		{"10", "", algorithms.Limit{Events: 10}},
		{"", "x", algorithms.Limit{Events: 3}},
		{"", "7", algorithms.Limit{Events: 3, Burst: 7}},
	} {
		repl := caddy.NewReplacer()
		repl.Set("e", tt.e)
		repl.Set("b", tt.b)
		l := z.request(repl, "key", false).Limit
		if l.Events != tt.want.Events || l.Burst != tt.want.Burst {
			t.Errorf("events %q burst %q: %v, want events %d burst %d", tt.e, tt.b, l, tt.want.Events, tt.want.Burst)
		}
	}
	// a cost is clamped to the request's capacity + 1, not the fallback's
	z = &Zone{Key: "k", MaxEvents: 3, Window: caddy.Duration(time.Minute), EventsPlaceholder: "{e}", Cost: "{c}"}
	if err := z.setup(uniqueZone("rl")); err != nil {
		t.Fatal(err)
	}
	repl := caddy.NewReplacer()
	repl.Set("e", "100")
	repl.Set("c", "50")
	if r := z.request(repl, "key", false); r.Cost != 50 {
		t.Errorf("cost 50 under limit 100: got %d", r.Cost)
	}
	repl.Set("c", "500")
	if r := z.request(repl, "key", false); r.Cost != 101 {
		t.Errorf("cost 500 under limit 100: got %d, want 101", r.Cost)
	}
}

func TestZonesAgreeOnLimitPlaceholder(t *testing.T) {
	mk := func(placeholder string, events int64) *Zone {
		z := &Zone{Key: "k", MaxEvents: events, Window: caddy.Duration(time.Minute), EventsPlaceholder: placeholder}
		if err := z.setup("agree"); err != nil {
			t.Fatal(err)
		}
		return z
	}
	if err := agree(mk("{a}", 3), mk("{a}", 3)); err != nil {
		t.Errorf("same: %v", err)
	}
	if err := agree(mk("{a}", 3), mk("{b}", 3)); err == nil || !strings.Contains(err.Error(), "events {a} here") {
		t.Errorf("other placeholder: %v", err)
	}
	if err := agree(mk("{a}", 3), mk("", 3)); err == nil {
		t.Errorf("placeholder and none: agreed")
	}
	if err := agree(mk("{a}", 3), mk("{a}", 4)); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("other fallback: %v", err)
	}
}

// serveMapped runs Caddy's map handler, then h: X-Plan mapped to
// {plan_limit} (free 3, pro 10, team "lots").
func serveMapped(t *testing.T, h *Handler, plan string) result {
	t.Helper()
	return serveMappedFrom(t, h, "{http.request.header.X-Plan}", map[string]string{"X-Plan": plan})
}

// serveMappedFrom runs Caddy's map handler, source mapped to {plan_limit}
// (free 3, pro 10, team "lots"), then h, on a request with headers.
func serveMappedFrom(t *testing.T, h *Handler, source string, headers map[string]string) result {
	t.Helper()
	var m maphandler.Handler
	raw := `{"source":"` + source + `","destinations":["{plan_limit}"],
		"mappings":[{"input":"free","outputs":[3]},{"input":"pro","outputs":["10"]},{"input":"team","outputs":["lots"]}]}`
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatal(err)
	}
	if err := m.Provision(testContext(t)); err != nil {
		t.Fatal(err)
	}
	o := reqOpts{remote: "192.0.2.9:1", headers: map[string]string{"X-Customer": "acme"}}
	for k, v := range headers {
		if v != "" {
			o.headers[k] = v
		}
	}
	return serveStack(t, o, &m, h)
}

// TestServeHTTPLimitFromMap: a plan header mapped to a limit; a key that
// used 3 as free and is then pro gets 7 more, not 10; headers show the
// request's own limit; a value that is no number falls back.
func TestServeHTTPLimitFromMap(t *testing.T) {
	for _, algorithm := range []string{"fixed_window", "sliding_window", "sliding_log", "token_bucket"} {
		t.Run(algorithm, func(t *testing.T) {
			zone := uniqueZone("map")
			h := newHandler(t, rateLimit("headers ietf legacy x",
				zoneCfg(zone, "key {http.request.header.X-Customer}", "algorithm "+algorithm, "events {plan_limit} 2", "window 1h")))
			admitted := func(plan string, n int) int {
				got := 0
				for range n {
					if serveMapped(t, h, plan).allowed() {
						got++
					}
				}
				return got
			}
			res := serveMapped(t, h, "free")
			if got := res.header("RateLimit-Policy"); got != `"`+zone+`";q=3;w=3600` {
				t.Errorf("free policy: %q", got)
			}
			if res.header("RateLimit-Limit") != "3" || res.header("X-RateLimit-Limit") != "3" || !strings.Contains(res.header("RateLimit"), ";r=2;") {
				t.Errorf("free headers: %v", res.rec.Header())
			}
			if got := admitted("free", 5); got != 2 {
				t.Errorf("free: %d more admitted, want 2", got)
			}
			// upgraded mid-window: 7 more, counting the 3 used
			res = serveMapped(t, h, "pro")
			if !res.allowed() || res.header("RateLimit-Policy") != `"`+zone+`";q=10;w=3600` || res.header("RateLimit-Limit") != "10" ||
				!strings.Contains(res.header("RateLimit"), ";r=6;") {
				t.Errorf("first pro request: allowed %v, headers %v", res.allowed(), res.rec.Header())
			}
			if got := admitted("pro", 10); got != 6 {
				t.Errorf("pro: %d more admitted, want 6 (7 in all after 3 as free)", got)
			}
			// back to free: denied, with the free limit in the headers
			res = serveMapped(t, h, "free")
			if res.allowed() || res.header("RateLimit-Limit") != "3" || !strings.Contains(res.header("RateLimit"), ";r=0;") {
				t.Errorf("free after pro: allowed %v, headers %v", res.allowed(), res.rec.Header())
			}
			// not a number, or no plan: the fallback 2
			for _, plan := range []string{"team", ""} {
				res = serveMapped(t, h, plan)
				if res.allowed() || res.header("RateLimit-Policy") != `"`+zone+`";q=2;w=3600` {
					t.Errorf("plan %q: allowed %v, headers %v", plan, res.allowed(), res.rec.Header())
				}
			}
		})
	}
}

// TestServeHTTPLimitFromJWT: the limit comes from the handler's own
// verified claim; a forged token's claim is never read, so it gets the
// fallback.
func TestServeHTTPLimitFromJWT(t *testing.T) {
	const secret = "per-request-limit-secret"
	token := func(key string, limit int) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": "acme", "plan_limit": limit, "exp": time.Now().Add(time.Hour).Unix(),
		}).SignedString([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + s
	}
	zone := uniqueZone("jwtlimit")
	h := newHandler(t, rateLimit(block("jwt", "secret "+secret),
		zoneCfg(zone, "key {http.request.remote.host}", "algorithm sliding_log", "events {jwt.plan_limit} 1", "window 1h")))
	count := func(auth, remote string, n int) (admitted int, limit string) {
		for range n {
			res := serve(t, h, reqOpts{remote: remote, headers: map[string]string{"Authorization": auth}})
			if res.allowed() {
				admitted++
			}
			limit = res.header("RateLimit-Limit")
		}
		return admitted, limit
	}
	if got, limit := count(token(secret, 4), "192.0.2.20:1", 6); got != 4 || limit != "4" {
		t.Errorf("verified claim 4: %d admitted, RateLimit-Limit %s", got, limit)
	}
	if got, limit := count(token("forged", 100), "192.0.2.21:1", 3); got != 1 || limit != "1" {
		t.Errorf("forged claim 100: %d admitted, RateLimit-Limit %s; want the fallback 1", got, limit)
	}
}

// TestServeHTTPLimitFromJWTThroughMap: Caddy's map reads the handler's
// verified claim {http.rate_limit.jwt.plan} when the zone reads the mapped
// value; a forged token's plan is never read.
func TestServeHTTPLimitFromJWTThroughMap(t *testing.T) {
	const secret = "per-request-map-secret"
	token := func(key, plan string) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": "acme", "plan": plan, "exp": time.Now().Add(time.Hour).Unix(),
		}).SignedString([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + s
	}
	zone := uniqueZone("jwtmap")
	h := newHandler(t, rateLimit(block("jwt", "secret "+secret),
		zoneCfg(zone, "key {http.request.header.X-Customer}", "algorithm fixed_window", "events {plan_limit} 1", "window 1h")))
	count := func(auth, customer string, n int) (admitted int, limit string) {
		for range n {
			res := serveMappedFrom(t, h, "{http.rate_limit.jwt.plan}", map[string]string{"Authorization": auth, "X-Customer": customer})
			if res.allowed() {
				admitted++
			}
			limit = res.header("RateLimit-Limit")
		}
		return admitted, limit
	}
	if got, limit := count(token(secret, "pro"), "verified", 12); got != 10 || limit != "10" {
		t.Errorf("verified pro: %d admitted, RateLimit-Limit %s; want 10", got, limit)
	}
	if got, limit := count(token("forged", "pro"), "forged", 3); got != 1 || limit != "1" {
		t.Errorf("forged pro: %d admitted, RateLimit-Limit %s; want the fallback 1", got, limit)
	}
}

// TestServeHTTPLimitOwnClaims: a zone's limit reads {jwt.*} from its own
// handler's verifier, never from an earlier handler that took a forged
// token at its word (insecure_skip_verify), even when its key names no
// claim.
func TestServeHTTPLimitOwnClaims(t *testing.T) {
	forged, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "x", "plan_limit": 100}).SignedString([]byte("wrong"))
	if err != nil {
		t.Fatal(err)
	}
	first := newHandler(t, rateLimit(block("jwt", "insecure_skip_verify"),
		zoneCfg(uniqueZone("loose"), "key {jwt.sub}", "events 1000", "window 1h")))
	second := newHandler(t, rateLimit(block("jwt", "secret per-request-own"),
		zoneCfg(uniqueZone("strict"), "key {http.request.remote.host}", "algorithm sliding_log", "events {jwt.plan_limit} 1", "window 1h")))
	admitted := 0
	for range 3 {
		if serveChain(t, first, second, "Bearer "+forged).allowed() {
			admitted++
		}
	}
	if admitted != 1 {
		t.Errorf("forged plan_limit 100: %d of 3 admitted, want 1 (the fallback)", admitted)
	}
}
