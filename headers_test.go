package sluice

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/headertest"
)

// Tests of the rate limit headers and Retry-After: the writer in
// headers.go directly, and what the handler sends.

// parseSFList parses the values of field as a List of members, failing t
// on anything else.
func parseSFList(t testing.TB, field string, values []string) []headertest.Member {
	t.Helper()
	members, err := headertest.ParseList(values)
	if err != nil {
		t.Fatalf("%s: %v", field, err)
	}
	return members
}

// rateLimitMember is one list member of a RateLimit header.
type rateLimitMember struct {
	name string
	r, t int64
}

// parseRateLimit parses a RateLimit header field value, in order: each
// member a zone's name with exactly the parameters r and t.
func parseRateLimit(t *testing.T, value string) []rateLimitMember {
	t.Helper()
	if value == "" {
		t.Fatal("RateLimit header missing")
	}
	var members []rateLimitMember
	for _, m := range parseSFList(t, "RateLimit", []string{value}) {
		if got := strings.Join(m.Params, ";"); got != "r;t" {
			t.Fatalf("RateLimit %q: member %q has parameters %s, want r;t", value, m.Name, got)
		}
		members = append(members, rateLimitMember{name: m.Name, r: m.Values["r"], t: m.Values["t"]})
	}
	return members
}

// remaining is the r of zone in the RateLimit header, failing if absent.
func remaining(t *testing.T, res result, zone string) int64 {
	t.Helper()
	for _, m := range parseRateLimit(t, res.header("RateLimit")) {
		if m.name == zone {
			return m.r
		}
	}
	t.Fatalf("RateLimit %q: zone %s missing", res.header("RateLimit"), zone)
	return 0
}

var (
	ietfFields   = []string{"RateLimit-Policy", "RateLimit"}
	legacyFields = []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}
	xFields      = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}
)

func TestServeHTTPHeaderStyles(t *testing.T) {
	tests := []struct {
		name    string
		headers string // the headers line; "" for the default
		present []string
		absent  []string
	}{
		{"default", "", append(append([]string{}, ietfFields...), legacyFields...), xFields},
		{"x", "headers x", xFields, append(append([]string{}, ietfFields...), legacyFields...)},
		{"ietf", "headers ietf", ietfFields, append(append([]string{}, legacyFields...), xFields...)},
		{"legacy", "headers legacy", legacyFields, append(append([]string{}, ietfFields...), xFields...)},
		{"ietf and x", "headers ietf x", append(append([]string{}, ietfFields...), xFields...), legacyFields},
		{"none", "headers none", nil, append(append(append([]string{}, ietfFields...), legacyFields...), xFields...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			zone := uniqueZone("hdr")
			h := newHandler(t, rateLimit(tt.headers, logZone(zone, 2, "1m")))
			check := func(res result, which string) {
				t.Helper()
				for _, f := range tt.present {
					if res.header(f) == "" {
						t.Errorf("%s response: %s missing", which, f)
					}
				}
				for _, f := range tt.absent {
					if v := res.header(f); v != "" {
						t.Errorf("%s response: %s = %q, want absent", which, f, v)
					}
				}
			}
			first := serve(t, h, reqOpts{})
			if !first.allowed() {
				t.Fatalf("first request: err %v; want allowed", first.err)
			}
			check(first, "allowed")
			if v := first.header("Retry-After"); v != "" {
				t.Errorf("allowed response: Retry-After = %q, want absent", v)
			}
			serve(t, h, reqOpts{})
			denied := serve(t, h, reqOpts{})
			wantDenied(t, denied, http.StatusTooManyRequests)
			check(denied, "denied")
		})
	}
}

func TestServeHTTPHeaderValues(t *testing.T) {
	zone := uniqueZone("hval")
	h := newHandler(t, rateLimit("headers ietf legacy x", logZone(zone, 5, "1m")))
	before := time.Now()
	res := serve(t, h, reqOpts{})
	if !res.allowed() {
		t.Fatalf("err %v; want allowed", res.err)
	}
	if got, want := res.header("RateLimit-Policy"), fmt.Sprintf(`"%s";q=5;w=60`, zone); got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	m := parseRateLimit(t, res.header("RateLimit"))
	if len(m) != 1 || m[0].name != zone || m[0].r != 4 || m[0].t < 1 || m[0].t > 60 {
		t.Errorf("RateLimit = %q, want \"%s\";r=4;t=<1..60>", res.header("RateLimit"), zone)
	}
	for field, want := range map[string]string{
		"RateLimit-Limit": "5", "RateLimit-Remaining": "4",
		"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "4",
	} {
		if got := res.header(field); got != want {
			t.Errorf("%s = %q, want %q", field, got, want)
		}
	}
	if reset, err := strconv.ParseInt(res.header("RateLimit-Reset"), 10, 64); err != nil || reset < 1 || reset > 60 {
		t.Errorf("RateLimit-Reset = %q, want seconds in [1, 60]", res.header("RateLimit-Reset"))
	}
	reset, err := strconv.ParseInt(res.header("X-RateLimit-Reset"), 10, 64)
	if err != nil || reset < before.Unix() || reset > time.Now().Add(61*time.Second).Unix() {
		t.Errorf("X-RateLimit-Reset = %q, want a Unix time within the next minute", res.header("X-RateLimit-Reset"))
	}
}

func TestServeHTTPHeaderZoneOrder(t *testing.T) {
	n := zoneSeq.Add(1)
	za, zb, zc := fmt.Sprintf("za-%d", n), fmt.Sprintf("zb-%d", n), fmt.Sprintf("zc-%d", n)
	// Declared out of order; zb has the least remaining.
	h := newHandler(t, rateLimit(logZone(zc, 10, "1m"), logZone(za, 20, "1m"), logZone(zb, 3, "1m")))
	res := serve(t, h, reqOpts{})
	if !res.allowed() {
		t.Fatalf("err %v; want allowed", res.err)
	}
	var names []string
	for _, m := range parseRateLimit(t, res.header("RateLimit")) {
		names = append(names, m.name)
	}
	if got, want := strings.Join(names, ","), strings.Join([]string{za, zb, zc}, ","); got != want {
		t.Errorf("RateLimit zones in order %s, want %s", got, want)
	}
	wantPolicy := fmt.Sprintf(`"%s";q=20;w=60, "%s";q=3;w=60, "%s";q=10;w=60`, za, zb, zc)
	if got := res.header("RateLimit-Policy"); got != wantPolicy {
		t.Errorf("RateLimit-Policy = %q, want %q", got, wantPolicy)
	}
	// legacy: the zone with the least remaining.
	if got, want := res.header("RateLimit-Limit")+"/"+res.header("RateLimit-Remaining"), "3/2"; got != want {
		t.Errorf("RateLimit-Limit/Remaining = %s, want %s (zone %s)", got, want, zb)
	}
}

func TestServeHTTPJitter(t *testing.T) {
	tests := []struct {
		name     string
		jitter   string
		min, max int64
		varies   bool
	}{
		{"jitter 0.5", "jitter 0.5", 10, 15, true},
		{"no jitter", "", 10, 10, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			zone := uniqueZone("jit")
			h := newHandler(t, rateLimit(tt.jitter, logZone(zone, 1, "10s")))
			if res := serve(t, h, reqOpts{}); !res.allowed() {
				t.Fatalf("first request: err %v; want allowed", res.err)
			}
			seen := make(map[int64]int)
			for range 60 {
				res := serve(t, h, reqOpts{})
				wantDenied(t, res, http.StatusTooManyRequests)
				got := retryAfter(t, res)
				if got < tt.min || got > tt.max {
					t.Errorf("Retry-After = %d, want within [%d, %d]", got, tt.min, tt.max)
				}
				seen[got]++
			}
			if varies := len(seen) > 1; varies != tt.varies {
				t.Errorf("Retry-After values %v: varies = %v, want %v", seen, varies, tt.varies)
			}
		})
	}
}

// headerZone is a zone as write sees it: its name, limit and policy member.
func headerZone(name string, l algorithms.Limit) *Zone {
	return &Zone{name: name, limit: l, policy: policyMember(name, l)}
}

// intField parses field, which must appear once, as a structured-field
// Integer, failing t otherwise.
func intField(t *testing.T, h http.Header, field string) int64 {
	t.Helper()
	values := h.Values(field)
	if len(values) != 1 {
		t.Fatalf("%s: %q, want one value", field, values)
	}
	item, err := httpsfv.UnmarshalItem(values)
	if err != nil {
		t.Fatalf("%s: %q: not a structured-field item: %v", field, values[0], err)
	}
	n, ok := item.Value.(int64)
	if !ok || len(item.Params.Names()) > 0 {
		t.Fatalf("%s: %q, want a bare integer", field, values[0])
	}
	return n
}

// formatMembers renders members as name;k=v;..., for comparison.
func formatMembers(members []headertest.Member) string {
	var parts []string
	for _, m := range members {
		part := strconv.Quote(m.Name)
		for _, k := range m.Params {
			part += fmt.Sprintf(";%s=%d", k, m.Values[k])
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

// TestHeaderStylesWrite checks the header writer directly: which fields
// each style sets, their values parsed as structured fields, rounding, the
// zone with the least remaining for legacy and x, and X-RateLimit-Reset
// from the now it is given.
func TestHeaderStylesWrite(t *testing.T) {
	minute := algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 100, Window: time.Minute}
	small := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 10, Window: 90 * time.Second}
	bucket := algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 10, Window: time.Second, Burst: 25}
	odd := algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: 3, Window: 1500 * time.Millisecond}
	now := time.Unix(1_000_000, 250_000_000)
	tests := []struct {
		name   string
		styles headerStyles
		zones  []*Zone
		ds     []algorithms.Decision
		policy string           // want RateLimit-Policy, formatted; "" absent
		state  string           // want RateLimit, formatted; "" absent
		ints   map[string]int64 // want integer fields
	}{
		{
			name: "ietf, one zone", styles: styleIETF,
			zones:  []*Zone{headerZone("api", minute)},
			ds:     []algorithms.Decision{{Allowed: true, Remaining: 42, MoreAfter: 18 * time.Second, ResetAfter: time.Hour}},
			policy: `"api";q=100;w=60`, state: `"api";r=42;t=18`,
		},
		{
			name: "ietf rounds t and w up, never sends a negative r; a debt's t is its retry", styles: styleIETF,
			zones:  []*Zone{headerZone("odd", odd)},
			ds:     []algorithms.Decision{{Remaining: -3, MoreAfter: 500 * time.Millisecond, RetryAfter: 1500 * time.Millisecond}},
			policy: `"odd";q=3;w=2`, state: `"odd";r=0;t=2`,
		},
		{
			name: "ietf, one member per zone in the order given", styles: styleIETF,
			zones: []*Zone{headerZone("b", minute), headerZone("a", small)},
			ds: []algorithms.Decision{
				{Allowed: true, Remaining: 99, MoreAfter: time.Second},
				{Allowed: true, Remaining: 9, MoreAfter: 90 * time.Second},
			},
			policy: `"b";q=100;w=60, "a";q=10;w=90`, state: `"b";r=99;t=1, "a";r=9;t=90`,
		},
		{
			name: "legacy: the zone with the least remaining", styles: styleLegacy,
			zones: []*Zone{headerZone("api", minute), headerZone("ip", small)},
			ds: []algorithms.Decision{
				{Allowed: true, Remaining: 42, MoreAfter: 18 * time.Second},
				{Allowed: true, Remaining: 7, MoreAfter: 2500 * time.Millisecond},
			},
			ints: map[string]int64{"RateLimit-Limit": 10, "RateLimit-Remaining": 7, "RateLimit-Reset": 3},
		},
		{
			name: "legacy: a token bucket's limit is its burst; in debt, t and Reset are its retry", styles: styleLegacy | styleIETF,
			zones:  []*Zone{headerZone("tb", bucket)},
			ds:     []algorithms.Decision{{Remaining: -1, MoreAfter: 100 * time.Millisecond, RetryAfter: 2100 * time.Millisecond}},
			policy: `"tb";q=10;w=1`, state: `"tb";r=0;t=3`,
			ints: map[string]int64{"RateLimit-Limit": 25, "RateLimit-Remaining": 0, "RateLimit-Reset": 3},
		},
		{
			name: "legacy: of two spent zones, the longer wait", styles: styleLegacy | styleIETF,
			zones: []*Zone{headerZone("api", minute), headerZone("ip", small)},
			ds: []algorithms.Decision{
				{Remaining: 0, MoreAfter: 5 * time.Second, RetryAfter: 5 * time.Second},
				{Remaining: 0, MoreAfter: 40 * time.Second, RetryAfter: 40 * time.Second},
			},
			policy: `"api";q=100;w=60, "ip";q=10;w=90`, state: `"api";r=0;t=5, "ip";r=0;t=40`,
			ints: map[string]int64{"RateLimit-Limit": 10, "RateLimit-Remaining": 0, "RateLimit-Reset": 40},
		},
		{
			name: "x: reset in Unix seconds, rounded up", styles: styleX,
			zones: []*Zone{headerZone("api", minute)},
			ds:    []algorithms.Decision{{Allowed: true, Remaining: 5, MoreAfter: 2 * time.Second}},
			ints:  map[string]int64{"X-RateLimit-Limit": 100, "X-RateLimit-Remaining": 5, "X-RateLimit-Reset": 1_000_003},
		},
		{
			name: "x: reset on a whole second stays", styles: styleX,
			zones: []*Zone{headerZone("api", minute)},
			ds:    []algorithms.Decision{{Allowed: true, Remaining: 5, MoreAfter: 2750 * time.Millisecond}},
			ints:  map[string]int64{"X-RateLimit-Limit": 100, "X-RateLimit-Remaining": 5, "X-RateLimit-Reset": 1_000_003},
		},
		{
			name: "default: ietf and legacy", styles: defaultHeaderStyles,
			zones:  []*Zone{headerZone("api", minute)},
			ds:     []algorithms.Decision{{Allowed: true, Remaining: 1, MoreAfter: time.Minute}},
			policy: `"api";q=100;w=60`, state: `"api";r=1;t=60`,
			ints: map[string]int64{"RateLimit-Limit": 100, "RateLimit-Remaining": 1, "RateLimit-Reset": 60},
		},
		{
			name: "none", styles: 0,
			zones: []*Zone{headerZone("api", minute)},
			ds:    []algorithms.Decision{{Allowed: true, Remaining: 1, MoreAfter: time.Minute}},
		},
	}
	all := append(append(append([]string{}, ietfFields...), legacyFields...), xFields...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			tt.styles.writeAll(h, &verdict{zones: tt.zones, ds: tt.ds}, now, 0)
			for field, want := range map[string]string{"RateLimit-Policy": tt.policy, "RateLimit": tt.state} {
				if want == "" {
					continue
				}
				if got := formatMembers(parseSFList(t, field, h.Values(field))); got != want {
					t.Errorf("%s = %s, want %s", field, got, want)
				}
			}
			for field, want := range tt.ints {
				if got := intField(t, h, field); got != want {
					t.Errorf("%s = %d, want %d", field, got, want)
				}
			}
			for _, field := range all {
				_, isInt := tt.ints[field]
				wanted := isInt || field == "RateLimit-Policy" && tt.policy != "" || field == "RateLimit" && tt.state != ""
				if v := h.Values(field); !wanted && len(v) > 0 {
					t.Errorf("%s = %q, want absent", field, v)
				}
			}
			if got, want := len(h), len(tt.ints)+min(len(tt.policy), 1)+min(len(tt.state), 1); got != want {
				t.Errorf("fields set: %d (%v), want %d", got, h, want)
			}
		})
	}
}

// TestWriteRetryAfter checks Retry-After: integer seconds, rounded up, at
// least 1, jitter only ever adding, and the value returned is the one sent.
func TestWriteRetryAfter(t *testing.T) {
	tests := []struct {
		name     string
		retry    time.Duration
		jitter   float64
		min, max int64 // seconds
	}{
		{"zero is one second", 0, 0, 1, 1},
		{"negative is one second", -5 * time.Second, 0, 1, 1},
		{"a nanosecond rounds up", time.Nanosecond, 0, 1, 1},
		{"whole seconds stay", 7 * time.Second, 0, 7, 7},
		{"just over a second rounds up", time.Second + time.Nanosecond, 0, 2, 2},
		{"59.5s", 59500 * time.Millisecond, 0, 60, 60},
		{"jitter 0.5 adds up to half", 10 * time.Second, 0.5, 10, 15},
		{"jitter 1 adds up to double", 10 * time.Second, 1, 10, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 50 {
				h := http.Header{}
				sent := jitteredRetry(tt.retry, tt.jitter)
				headerStyles(0).writeAll(h, &verdict{}, time.Time{}, ceilSeconds(sent))
				got := intField(t, h, "Retry-After")
				if got < tt.min || got > tt.max {
					t.Errorf("Retry-After = %d, want within [%d, %d]", got, tt.min, tt.max)
				}
				if want := time.Duration(got) * time.Second; sent != want {
					t.Errorf("returned %v, want %v (the value sent)", sent, want)
				}
			}
		})
	}
}

// TestServeHTTPRetryAfterNotBeforeT: on a rejection, t (and RateLimit-Reset)
// is the effective window of the zone that denied, and Retry-After is never
// earlier, for every algorithm; t is not the time until the quota is whole.
func TestServeHTTPRetryAfterNotBeforeT(t *testing.T) {
	tests := []struct {
		algorithm string
		maxT      int64 // the latest t can be, in seconds
	}{
		{"fixed_window", 60},
		{"sliding_window", 63}, // a slot (1m/20 = 3 s) counts whole until it has left the window
		{"sliding_log", 60},
		{"token_bucket", 6}, // one token every 6 s, not 60 s for all 10
	}
	for _, tt := range tests {
		t.Run(tt.algorithm, func(t *testing.T) {
			zone := uniqueZone("tmore")
			h := newHandler(t, fmt.Sprintf(`rate_limit {
				headers ietf legacy
				zone %s {
					key {http.request.remote.host}
					algorithm %s
					events 10
					window 1m
				}
			}`, zone, tt.algorithm))
			for i := range 10 {
				if res := serve(t, h, reqOpts{}); !res.allowed() {
					t.Fatalf("request %d: denied (%v), want allowed", i, res.err)
				}
			}
			res := serve(t, h, reqOpts{})
			wantDenied(t, res, 429)
			m := parseRateLimit(t, res.header("RateLimit"))
			if len(m) != 1 {
				t.Fatalf("RateLimit %q: want one member", res.header("RateLimit"))
			}
			if m[0].t < 1 || m[0].t > tt.maxT {
				t.Errorf("t: got %d, want 1 to %d", m[0].t, tt.maxT)
			}
			if got := retryAfter(t, res); got < m[0].t {
				t.Errorf("Retry-After: got %d, want ≥ t = %d", got, m[0].t)
			}
			if got, want := res.header("RateLimit-Reset"), strconv.FormatInt(m[0].t, 10); got != want {
				t.Errorf("RateLimit-Reset: got %s, want t = %s", got, want)
			}
		})
	}
}

// TestHeaderStyleTable: each style's bit is its entry in the table, the
// Caddyfile names parse to them, and the errors name the table's styles.
func TestHeaderStyleTable(t *testing.T) {
	for name, want := range map[string]headerStyles{"ietf": styleIETF, "legacy": styleLegacy, "x": styleX, "pk": stylePK} {
		if got, ok := styleNamed(name); !ok || got != want {
			t.Errorf("style %s: got bit %b, want %b", name, got, want)
		}
	}
	tests := []struct {
		names []string
		want  headerStyles
		err   string
	}{
		{nil, styleIETF | styleLegacy, ""},
		{[]string{"x", "ietf", "pk"}, styleX | styleIETF | stylePK, ""},
		{[]string{"none"}, 0, ""},
		{[]string{"none", "x"}, 0, "headers: none excludes other styles"},
		{[]string{"draft12"}, 0, `headers: unknown style "draft12" (want ietf, legacy, x, pk or none)`},
		{[]string{"x", "x"}, 0, "headers: x given twice"},
		{[]string{"legacy", "pk"}, 0, "headers: pk needs ietf: it is a parameter of the RateLimit members"},
	}
	for _, tt := range tests {
		got, err := parseHeaderStyles(tt.names)
		if errText := fmt.Sprint(err); tt.err != "" && errText != tt.err || tt.err == "" && err != nil {
			t.Errorf("%q: error %v, want %q", tt.names, err, tt.err)
		}
		if err == nil && got != tt.want {
			t.Errorf("%q: got %b, want %b", tt.names, got, tt.want)
		}
	}
}
