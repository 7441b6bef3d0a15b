package sluice_test

import (
	"encoding/json"
	"flag"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/sluicehq/caddy-sluice"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// validate provisions and validates a JSON config without starting it.
func validate(t *testing.T, config []byte) error {
	t.Helper()
	var cfg caddy.Config
	if err := json.Unmarshal(config, &cfg); err != nil {
		t.Fatalf("decoding config: %v\n%s", err, config)
	}
	return caddy.Validate(&cfg)
}

// checkRateLimitHandler checks the parts of the adapted example that the
// golden file could silently lose: the handler, its zones and their keys.
func checkRateLimitHandler(t *testing.T, config []byte, redis bool) {
	t.Helper()
	s := string(config)
	for _, want := range []string{
		`"handler": "rate_limit"`,
		`"rate_limits": {`,
		`"login": {`, `"tenant": {`, `"per_ip": {`,
		`"key": "{http.vars.client_ip}"`,
		`"key": "{http.request.header.X-Tenant}"`,
		`"algorithm": "sliding_log"`, `"algorithm": "token_bucket"`,
		`"max_events": 5`, `"max_events": 100`, `"max_events": 10`,
		`"burst": 120`, `"ipv4_prefix": 24`, `"ipv6_prefix": 64`,
		`"failure_mode": "open"`,
		`"/login"`, `"/api/*"`, `"POST"`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("adapted config lacks %s", want)
		}
	}
	// the url is read from the environment when Caddy starts
	if got, want := strings.Contains(s, `"url": "{env.REDIS_URL}"`), redis; got != want {
		t.Errorf("adapted config has the redis url: got %v, want %v", got, want)
	}
}

// TestValidateJSON checks that bad values in JSON config, which has no
// Caddyfile line to point at, fail validation with a message naming the
// option.
func TestValidateJSON(t *testing.T) {
	const goodZone = `"key": "{http.request.remote.host}", "max_events": 10, "window": 60000000000`
	tests := []struct {
		name string
		top  string // the handler's own fields, JSON
		zone string // the fields of its zone z, JSON; "" for no zone z
		want []string
	}{
		{"max_events 0", "", `"key": "k", "max_events": 0, "window": 60000000000`, []string{"z", "events"}},
		{"max_events -1", "", `"key": "k", "max_events": -1, "window": 60000000000`, []string{"z", "events"}},
		{"window 0", "", `"key": "k", "max_events": 10`, []string{"z", "window"}},
		{"window negative", "", `"key": "k", "max_events": 10, "window": "-1s"`, []string{"z", "window"}},
		{"no key", "", `"max_events": 10, "window": "1m"`, []string{"z", "key"}},
		{"algorithm leaky", "", goodZone + `, "algorithm": "leaky"`, []string{"z", "algorithm", "leaky"}},
		{"burst without token_bucket", "", goodZone + `, "burst": 5`, []string{"z", "burst"}},
		{"cost abc", "", goodZone + `, "cost": "abc"`, []string{"z", "cost", "abc"}},
		{"cost above the limit", "", goodZone + `, "cost": "11"`, []string{"z", "cost"}},
		{"ipv4_prefix 33", "", goodZone + `, "ipv4_prefix": 33`, []string{"z", "ipv4_prefix"}},
		{"ipv6_prefix 129", "", goodZone + `, "ipv6_prefix": 129`, []string{"z", "ipv6_prefix"}},
		{"quota_lease above the window", "", goodZone + `, "window": "100ms", "quota_lease": "200ms"`, []string{"z", "quota_lease", "window", "100ms", "200ms"}},
		{"quota_lease above 10s", "", goodZone + `, "quota_lease": "11s"`, []string{"z", "quota_lease", "10s", "11s"}},
		{"quota_lease under 1ms", "", goodZone + `, "quota_lease": "999us"`, []string{"z", "quota_lease", "1ms", "999µs"}},
		{"period quota_lease above 10s", "", `"key": "k", "max_events": 10, "period": "day", "quota_lease": "1m"`, []string{"z", "quota_lease", "10s", "1m0s"}},
		{"handler quota_lease above 10s", `"quota_lease": "20s"`, goodZone, []string{"quota_lease", "10s", "20s"}},
		{"handler quota_lease under 1ms", `"quota_lease": 1000`, goodZone, []string{"quota_lease", "1ms", "1µs"}},
		{"zone name with a space", `"rate_limits": {"a b": {` + goodZone + `}}`, "", []string{"a b", "name"}},
		{"no zones", `"status": 429`, "", []string{"zone"}},
		{"failure_mode sideways", `"failure_mode": "sideways"`, goodZone, []string{"failure_mode", "sideways"}},
		{"status 200", `"status": 200`, goodZone, []string{"status", "200"}},
		{"jitter 2", `"jitter": 2`, goodZone, []string{"jitter", "2"}},
		{"headers bogus", `"headers": ["bogus"]`, goodZone, []string{"headers", "bogus"}},
		{"headers none and x", `"headers": ["none", "x"]`, goodZone, []string{"headers", "none"}},
		{"redis without address", `"redis": {"db": 1}`, goodZone, []string{"redis", "url"}},
		{"redis url and addresses", `"redis": {"url": "redis://a:6379", "addresses": ["b:6379"]}`, goodZone, []string{"redis", "url", "addresses"}},
		{"redis bad url", `"redis": {"url": "http://a:6379"}`, goodZone, []string{"redis", "url"}},
		{"redis negative timeout", `"redis": {"url": "redis://a:6379", "timeout": "-1s"}`, goodZone, []string{"redis", "timeout"}},
		{"redis missing tls_ca", `"redis": {"url": "redis://a:6379", "tls_ca": "/nonexistent/ca.pem"}`, goodZone, []string{"tls_ca"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			handler := handlerJSON(tt.top, tt.zone)
			err := validate(t, config(handler))
			if err == nil {
				t.Fatalf("caddy.Validate accepted %s", handler)
			}
			t.Logf("error: %v", err)
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// handlerJSON is a rate_limit handler with the fields top and, unless zone
// is "", one zone z with the fields zone.
func handlerJSON(top, zone string) string {
	fields := `"handler": "rate_limit"`
	if top != "" {
		fields += ", " + top
	}
	if zone != "" {
		fields += `, "rate_limits": {"z": {` + zone + `}}`
	}
	return "{" + fields + "}"
}

// TestValidateJSONGood checks that a JSON config with every field set
// provisions and validates.
func TestValidateJSONGood(t *testing.T) {
	handler := `{
		"handler": "rate_limit",
		"failure_mode": "closed",
		"headers": ["ietf", "x"],
		"status": 503,
		"dry_run": true,
		"log_key": true,
		"jitter": 0.2,
		"distributed": {"read_interval": "5s"},
		"sweep_interval": "1m",
		"rate_limits": {
			"api": {
				"match": [{"path": ["/api/*"]}],
				"key": "{http.request.header.X-API-Key}",
				"algorithm": "token_bucket",
				"max_events": 100,
				"window": "1m",
				"burst": 120,
				"cost": "{http.request.header.X-Cost}",
				"ipv4_prefix": 24,
				"ipv6_prefix": 64,
				"quota_lease": "500ms",
				"dry_run": true
			}
		},
		"quota_lease": "2s"
	}`
	if err := validate(t, config(handler)); err != nil {
		t.Errorf("caddy.Validate: %v", err)
	}
}

// TestValidateJSONFailureModes checks the documented failure modes:
// open, closed and local.
func TestValidateJSONFailureModes(t *testing.T) {
	for _, mode := range []string{"open", "closed", "local"} {
		t.Run(mode, func(t *testing.T) {
			handler := handlerJSON(`"failure_mode": "`+mode+`"`, `"key": "k", "max_events": 10, "window": "1m"`)
			if err := validate(t, config(handler)); err != nil {
				t.Errorf("caddy.Validate: %v", err)
			}
		})
	}
}

// TestValidateJSONZoneConflict checks that zone names are
// global: two handlers declaring one zone with different limits fail to
// provision, with both places named.
func TestValidateJSONZoneConflict(t *testing.T) {
	cfg := []byte(`{"apps": {"http": {"servers": {
		"a": {"listen": [":0"], "routes": [{"handle": [{"handler": "rate_limit", "rate_limits": {"conflict_test": {"key": "k", "max_events": 10, "window": "1m"}}}]}]},
		"b": {"listen": [":1"], "routes": [{"handle": [{"handler": "rate_limit", "rate_limits": {"conflict_test": {"key": "k", "max_events": 20, "window": "1m"}}}]}]}
	}}}}`)
	err := validate(t, cfg)
	if err == nil {
		t.Fatal("caddy.Validate accepted one zone with two different limits")
	}
	if !strings.Contains(err.Error(), "conflict_test") {
		t.Errorf("error %q does not name the zone", err)
	}
}

// TestValidateJSONQuotaLease: quota_lease in force from 1ms to the
// window (at most 10s), off when negative, and the handler's value above
// a zone's window is that zone's default, not an error.
func TestValidateJSONQuotaLease(t *testing.T) {
	for _, tt := range []struct{ name, top, zone string }{
		{"zone 1ms", "", `"key": "k", "max_events": 10, "window": "1s", "quota_lease": "1ms"`},
		{"zone equal to the window", "", `"key": "k", "max_events": 10, "window": "100ms", "quota_lease": "100ms"`},
		{"zone 10s", "", `"key": "k", "max_events": 10, "window": "1h", "quota_lease": "10s"`},
		{"zone off", "", `"key": "k", "max_events": 10, "window": "1ms", "quota_lease": -1`},
		{"period zone 10s", "", `"key": "k", "max_events": 10, "period": "month", "quota_lease": "10s"`},
		{"handler above a zone's window", `"quota_lease": "10s"`, `"key": "k", "max_events": 10, "window": "100ms"`},
		{"handler off", `"quota_lease": "-1ns"`, `"key": "k", "max_events": 10, "window": "1m"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := validate(t, config(handlerJSON(tt.top, tt.zone))); err != nil {
				t.Errorf("caddy.Validate: %v", err)
			}
		})
	}
}

// config wraps one handler in a minimal HTTP app config.
func config(handler string) []byte {
	return []byte(`{"apps": {"http": {"servers": {"s": {
		"listen": [":0"],
		"routes": [{"handle": [` + handler + `]}]
	}}}}}`)
}

// TestValidateJSONShape checks the JSON fields of problem_details and pk
// through caddy.Validate.
func TestValidateJSONShape(t *testing.T) {
	const zone = `"rate_limits": {"z": {"key": "{http.request.remote.host}", "max_events": 10, "window": 60000000000}}`
	tests := []struct {
		name    string
		handler string
		want    []string // substrings of the error; nil: valid
	}{
		{"problem_details", `"problem_details": true, ` + zone, nil},
		{"ietf pk", `"headers": ["ietf", "pk"], ` + zone, nil},
		{"pk without ietf", `"headers": ["legacy", "pk"], ` + zone, []string{"headers", "pk", "ietf"}},
		{"pk alone", `"headers": ["pk"], ` + zone, []string{"headers", "pk", "ietf"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg caddy.Config
			raw := `{"apps": {"http": {"servers": {"s": {"listen": [":0"],
				"routes": [{"handle": [{"handler": "rate_limit", ` + tt.handler + `}]}]}}}}}`
			if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
				t.Fatalf("decoding config: %v\n%s", err, raw)
			}
			err := caddy.Validate(&cfg)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("caddy.Validate: %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("caddy.Validate accepted %s", tt.handler)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
