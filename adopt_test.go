package sluice

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// Tests of what a stranger meets first: mholt/caddy-ratelimit's options
// (disable_metrics, a prefix of 0), quota_lease in JSON, burst where the
// algorithm has none, and placeholders that can only ever be empty.

// TestCaddyfileMholtOptions: disable_metrics, ipv4_prefix 0 and
// ipv6_prefix 0 parse as mholt/caddy-ratelimit reads them, to the same
// JSON field names.
func TestCaddyfileMholtOptions(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  *Handler
		json  string // a substring of the handler's JSON; "" for none
	}{
		{
			name:  "disable_metrics",
			input: minimal("disable_metrics"),
			want:  &Handler{Zones: map[string]*Zone{"z": zone1(nil)}, DisableMetrics: true},
			json:  `"disable_metrics":true`,
		},
		{
			name:  "prefixes of 0 are unset",
			input: rateLimit(zoneCfg("z", "key {remote_host}", "events 10", "window 1m", "ipv4_prefix 0", "ipv6_prefix 0")),
			want:  &Handler{Zones: map[string]*Zone{"z": zone1(nil)}},
		},
		{
			name:  "ipv6_prefix 64 beside ipv4_prefix 0",
			input: rateLimit(zoneCfg("z", "key {remote_host}", "events 10", "window 1m", "ipv4_prefix 0", "ipv6_prefix 64")),
			want:  &Handler{Zones: map[string]*Zone{"z": zone1(func(z *Zone) { z.IPv6Prefix = 64 })}},
			json:  `"ipv6_prefix":64`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parse(t, tt.input)
			if err != nil {
				t.Fatalf("UnmarshalCaddyfile: %v", err)
			}
			g, w := toJSON(t, got), toJSON(t, tt.want)
			if g != w {
				t.Errorf("parsed handler:\n got %s\nwant %s", g, w)
			}
			if !strings.Contains(g, tt.json) {
				t.Errorf("JSON %s lacks %s", g, tt.json)
			}
		})
	}
	wantParseError(t, minimal("disable_metrics yes"), []string{"disable_metrics", "takes no value"}, 2)
	wantParseError(t, minimal("disable_metrics", "disable_metrics"), []string{"disable_metrics", "more than once"}, 3)
	wantParseError(t, zoneBlock("key k", "events 1", "window 1s", "ipv4_prefix -1"), []string{"ipv4_prefix", "from 0 to 32"}, 6)
}

// decisionSeries are the zones with a caddy_rate_limit_decisions_total
// series on the context's registry.
func decisionSeries(t *testing.T, h *Handler) map[string]bool {
	t.Helper()
	families, err := h.ctx.GetMetricsRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	zones := map[string]bool{}
	for _, f := range families {
		if f.GetName() != "caddy_rate_limit_decisions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "zone" && m.GetCounter().GetValue() > 0 {
					zones[l.GetValue()] = true
				}
			}
		}
	}
	return zones
}

// TestDisableMetrics: a handler with disable_metrics decides as before
// but its decisions are not in the config's metrics; a handler beside it
// without the option is counted as usual.
func TestDisableMetrics(t *testing.T) {
	ctx := testContext(t)
	quiet, counted := uniqueZone("quiet"), uniqueZone("counted")
	hQuiet := newHandlerIn(t, ctx, rateLimit("disable_metrics", zoneCfg(quiet, "key static", "events 1", "window 1h", "max_delay 1s", "algorithm token_bucket")))
	hCounted := newHandlerIn(t, ctx, rateLimit(zoneCfg(counted, "key static", "events 1", "window 1h")))
	if !hQuiet.DisableMetrics || hCounted.DisableMetrics {
		t.Fatalf("DisableMetrics: quiet %v, counted %v", hQuiet.DisableMetrics, hCounted.DisableMetrics)
	}
	for _, h := range []*Handler{hQuiet, hCounted} {
		if !serve(t, h, reqOpts{}).allowed() {
			t.Fatal("first request denied")
		}
		wantDenied(t, serve(t, h, reqOpts{}), 429)
	}
	series := decisionSeries(t, hCounted)
	if !series[counted] {
		t.Errorf("zone %s (metrics on): no decisions counted; series %v", counted, series)
	}
	if series[quiet] {
		t.Errorf("zone %s (disable_metrics): decisions counted; series %v", quiet, series)
	}
	families, err := ctx.GetMetricsRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "zone" && l.GetValue() == quiet {
					t.Errorf("zone %s (disable_metrics) has a series in %s", quiet, f.GetName())
				}
			}
		}
	}
}

// TestJSONQuotaLease: quota_lease in JSON, as Caddy loads it: "off" and a
// negative duration are off, and a value that is no duration fails
// naming the field (and the zone), where Caddy's own error names neither.
func TestJSONQuotaLease(t *testing.T) {
	const zone = `"key": "k", "max_events": 10, "window": "1m"`
	tests := []struct {
		name       string
		top, lease string // the handler's own fields and the zone's quota_lease, JSON
		handler    time.Duration
		zone       time.Duration
		err        []string // substrings of the error; nil: loads
	}{
		{name: "zone off", lease: `"off"`, zone: time.Duration(quotaLeaseOff)},
		{name: "zone negative", lease: `"-1s"`, zone: -time.Second},
		{name: "zone negative nanoseconds", lease: `-1`, zone: -1},
		{name: "zone duration", lease: `"2s"`, zone: 2 * time.Second},
		{name: "zone nanoseconds", lease: `5000000`, zone: 5 * time.Millisecond},
		{name: "zone null", lease: `null`},
		{name: "handler off", top: `"quota_lease": "off", `, handler: time.Duration(quotaLeaseOff)},
		{name: "handler duration", top: `"quota_lease": "1s", `, handler: time.Second},
		{name: "zone abc", lease: `"abc"`, err: []string{"zone z", "quota_lease", `got "abc"`, "1ms", "10s", `"off"`}},
		{name: "zone true", lease: `true`, err: []string{"zone z", "quota_lease", "got true"}},
		{name: "zone Off", lease: `"Off"`, err: []string{"zone z", "quota_lease", `got "Off"`}},
		{name: "handler abc", top: `"quota_lease": "abc", `, err: []string{"quota_lease", `got "abc"`, "1ms", "10s"}},
		// the range, checked by Validate
		{name: "zone 11s", lease: `"11s"`, err: []string{"zone z", "quota_lease", "from 1ms to 10s", "got 11s"}},
		{name: "handler 11s", top: `"quota_lease": "11s", `, err: []string{"quota_lease", "from 1ms to 10s", "got 11s"}},
		// still strict, as Caddy decodes modules
		{name: "unknown zone field", lease: `"1s", "bogus": 1`, err: []string{"bogus"}},
		{name: "unknown handler field", top: `"bogus": 1, `, err: []string{"bogus"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			z := zone
			if tt.lease != "" {
				z += `, "quota_lease": ` + tt.lease
			}
			raw := `{` + tt.top + `"rate_limits": {"z": {` + z + `}}}`
			mod, err := testContext(t).LoadModuleByID("http.handlers.rate_limit", json.RawMessage(raw))
			if tt.err == nil {
				if err != nil {
					t.Fatalf("loading %s: %v", raw, err)
				}
				h := mod.(*Handler)
				if got := time.Duration(h.QuotaLease); got != tt.handler {
					t.Errorf("handler quota_lease: got %v, want %v", got, tt.handler)
				}
				if got := time.Duration(h.Zones["z"].QuotaLease); got != tt.zone {
					t.Errorf("zone quota_lease: got %v, want %v", got, tt.zone)
				}
				return
			}
			if err == nil {
				t.Fatalf("loading %s: no error, want one containing %q", raw, tt.err)
			}
			for _, w := range tt.err {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	// the Caddyfile's off is the JSON's "off": it decodes back as off
	h, err := parse(t, zoneBlock("key k", "events 1", "window 1s", "quota_lease off"))
	if err != nil {
		t.Fatal(err)
	}
	var back Handler
	if err := json.Unmarshal([]byte(toJSON(t, h)), &back); err != nil {
		t.Fatal(err)
	}
	if back.Zones["z"].QuotaLease >= 0 {
		t.Errorf("quota_lease off through JSON: got %v, want off (negative)", back.Zones["z"].QuotaLease)
	}
}

// TestJSONBurstWithoutBurst: a JSON burst on an algorithm without one
// fails validation naming burst and the algorithm, as the Caddyfile does
// (there on the burst line: TestUnmarshalCaddyfileErrors).
func TestJSONBurstWithoutBurst(t *testing.T) {
	for _, algorithm := range []string{"", "fixed_window", "sliding_log", "concurrency"} {
		shown := algorithm
		if shown == "" {
			shown = "sliding_window"
		}
		for _, burst := range []string{`"burst": 5`, `"burst": 5, "burst_placeholder": "{http.vars.b}"`} {
			raw := `{"rate_limits": {"z": {"key": "k", "max_events": 10, "window": "1m", "algorithm": "` + algorithm + `", ` + burst + `}}}`
			_, err := testContext(t).LoadModuleByID("http.handlers.rate_limit", json.RawMessage(raw))
			want := "zone z: burst: " + shown + " has no burst: only token_bucket has a capacity apart from events"
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %v, want it to contain %q", raw, err, want)
			}
		}
	}
}

// TestClaimsWithoutJWTBlock: a {jwt.*} placeholder in a handler without a
// jwt block is always empty, so it fails at parse (at the option's line,
// wherever the jwt block would be) and in JSON validation.
func TestClaimsWithoutJWTBlock(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  []string // substrings of the error; nil: parses
		line  int
	}{
		{"key", zoneBlock("key {jwt.tenant}", "events 1", "window 1s"), []string{"zone z", "key", "{jwt.tenant}", "no jwt block"}, 3},
		{"key with more", zoneBlock("events 1", "window 1s", "key {method}:{jwt.org.id}:{path}"), []string{"zone z", "key", "{jwt.org.id}"}, 5},
		{"events", zoneBlock("key k", "events {jwt.limit} 5", "window 1s"), []string{"zone z", "events", "{jwt.limit}"}, 4},
		{"burst", zoneBlock("key k", "algorithm token_bucket", "events 5", "window 1s", "burst {jwt.burst} 5"), []string{"zone z", "burst", "{jwt.burst}"}, 7},
		{"cost", zoneBlock("key k", "events 5", "window 1s", "cost {jwt.cost}"), []string{"zone z", "cost", "{jwt.cost}"}, 6},
		{"cost_from_response", zoneBlock("key k", "events 5", "window 1s", "cost_from_response {jwt.cost}"), []string{"zone z", "cost_from_response", "{jwt.cost}"}, 6},
		{"second zone", rateLimit(zoneCfg("a", tinyZone...), zoneCfg("b", "key {jwt.sub}", "events 1", "window 1s")), []string{"zone b", "key", "{jwt.sub}"}, 8},
		{"jwt block after the zone", rateLimit(zoneCfg("z", "key {jwt.tenant}", "events 1", "window 1s"), block("jwt", "secret s")), nil, 0},
		{"jwt block before the zone", rateLimit(block("jwt", "secret s"), zoneCfg("z", "key {jwt.tenant}", "events 1", "window 1s")), nil, 0},
		{"another handler's claims", zoneBlock("key {http.rate_limit.jwt.tenant}", "events 1", "window 1s"), nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want != nil {
				wantParseError(t, tt.input, tt.want, tt.line)
				return
			}
			if _, err := parse(t, tt.input); err != nil {
				t.Errorf("UnmarshalCaddyfile: %v", err)
			}
		})
	}
	raw := `{"rate_limits": {"z": {"key": "{jwt.tenant}", "max_events": 10, "window": "1m"}}}`
	_, err := testContext(t).LoadModuleByID("http.handlers.rate_limit", json.RawMessage(raw))
	if err == nil || !strings.Contains(err.Error(), "zone z: key: {jwt.tenant} is always empty") {
		t.Errorf("JSON %s: error %v, want one naming zone z, key and {jwt.tenant}", raw, err)
	}
	raw = `{"jwt": {"secret": "s"}, "rate_limits": {"z": {"key": "{jwt.tenant}", "max_events": 10, "window": "1m"}}}`
	if _, err := testContext(t).LoadModuleByID("http.handlers.rate_limit", json.RawMessage(raw)); err != nil {
		t.Errorf("JSON %s: %v", raw, err)
	}
}

// TestUnbalancedBraces: a template whose braces do not pair as Caddy's
// replacer reads them fails at the option's line: an unclosed { is text
// (the placeholder never expands, every request shares one key), a }
// closes nothing, a { inside a placeholder makes an unknown one. Escaped
// braces are text, as Caddy reads them.
func TestUnbalancedBraces(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  []string // nil: parses
		line  int
	}{
		{"unclosed key", zoneBlock("key {http.request.header.X-Tenant", "events 1", "window 1s"), []string{"zone z", "key", `"{http.request.header.X-Tenant" is never closed`}, 3},
		{"unclosed after a placeholder", zoneBlock("events 1", "window 1s", "key {method}:{path"), []string{"zone z", "key", `"{path" is never closed`}, 5},
		{"stray close", zoneBlock("key http.request.header.X-Tenant}", "events 1", "window 1s"), []string{"zone z", "key", "closes no placeholder"}, 3},
		{"nested open", zoneBlock("key {http.request.header.{path}}", "events 1", "window 1s"), []string{"zone z", "key", "inside another"}, 3},
		{"unclosed events", zoneBlock("key k", "events {http.vars.limit 5", "window 1s"), []string{"zone z", "events", "never closed"}, 4},
		{"unclosed burst", zoneBlock("key k", "algorithm token_bucket", "events 5", "window 1s", "burst {http.vars.b 5"), []string{"zone z", "burst", "never closed"}, 7},
		{"unclosed cost", zoneBlock("key k", "events 5", "window 1s", "cost {http.vars.cost"), []string{"zone z", "cost", "never closed"}, 6},
		{"unclosed cost_from_response", zoneBlock("key k", "events 5", "window 1s", "cost_from_response {http.response.header.X-Cost"), []string{"zone z", "cost_from_response", "never closed"}, 6},
		{"escaped braces", zoneBlock(`key \{literal\}:{path}`, "events 1", "window 1s"), nil, 0},
		{"balanced", zoneBlock("key {http.request.header.X-Tenant}:{method}{path}", "events 1", "window 1s"), nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want != nil {
				wantParseError(t, tt.input, tt.want, tt.line)
				return
			}
			if _, err := parse(t, tt.input); err != nil {
				t.Errorf("UnmarshalCaddyfile: %v", err)
			}
		})
	}
	raw := `{"rate_limits": {"z": {"key": "{http.request.header.X-Tenant", "max_events": 10, "window": "1m"}}}`
	_, err := testContext(t).LoadModuleByID("http.handlers.rate_limit", json.RawMessage(raw))
	if err == nil || !strings.Contains(err.Error(), "zone z: key:") || !strings.Contains(err.Error(), "never closed") {
		t.Errorf("JSON %s: error %v, want one naming zone z and key", raw, err)
	}
}

// TestUnsetEnvPlaceholders: the {env.*} placeholders of a config whose
// variable is unset at provision are listed, once each, for Provision's
// warning; set ones (even empty) are not, and the config still loads.
func TestUnsetEnvPlaceholders(t *testing.T) {
	t.Setenv("SLUICE_TEST_SET", "x")
	t.Setenv("SLUICE_TEST_EMPTY", "")
	input := rateLimit(
		block("jwt", "secret {env.SLUICE_TEST_UNSET_SECRET}"),
		zoneCfg("z", "key {env.SLUICE_TEST_SET}:{env.SLUICE_TEST_EMPTY}:{env.SLUICE_TEST_UNSET_KEY}:{jwt.sub}", "events 1", "window 1s"),
		zoneCfg("y", "key {env.SLUICE_TEST_UNSET_KEY}", "events 1", "window 1s"),
	)
	h, err := parse(t, input)
	if err != nil {
		t.Fatal(err)
	}
	got := h.unsetEnv()
	slices.Sort(got)
	want := []string{"{env.SLUICE_TEST_UNSET_KEY}", "{env.SLUICE_TEST_UNSET_SECRET}"}
	if !slices.Equal(got, want) {
		t.Errorf("unset: got %q, want %q", got, want)
	}
	if got := newHandler(t, rateLimit(zoneCfg(uniqueZone("env"), "key {env.SLUICE_TEST_UNSET_KEY}", "events 1", "window 1s"))); got == nil {
		t.Error("a config with an unset {env.*} did not load")
	}
}
