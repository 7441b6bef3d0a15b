package sluice

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// parse runs UnmarshalCaddyfile on input, as the rate_limit directive's
// tokens (the matcher already stripped, as httpcaddyfile does).
func parse(t *testing.T, input string) (*Handler, error) {
	t.Helper()
	h := new(Handler)
	err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
	return h, err
}

// toJSON encodes v, so that parsed and expected handlers compare by the
// configuration they would produce (raw matcher JSON included).
func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encoding %T: %v", v, err)
	}
	return string(b)
}

func dur(d time.Duration) caddy.Duration { return caddy.Duration(d) }

// zone1 is the zone that minimal() declares.
func zone1(edit func(*Zone)) *Zone {
	z := &Zone{Key: "{remote_host}", MaxEvents: 10, Window: dur(time.Minute)}
	if edit != nil {
		edit(z)
	}
	return z
}

func TestUnmarshalCaddyfile(t *testing.T) {
	zones := func(z *Zone) map[string]*Zone { return map[string]*Zone{"z": z} }
	tests := []struct {
		name  string
		input string
		want  *Handler
	}{
		{
			name:  "mholt/caddy-ratelimit Caddyfile",
			input: minimal(), // zone, key, events, window: mholt's syntax
			want:  &Handler{Zones: zones(zone1(nil))},
		},
		{
			name: "mholt compatibility options are accepted",
			input: minimal(
				block("distributed", "read_interval 5s", "write_interval 5s", "purge_age 1m"),
				block("storage file_system", "root /var/lib/caddy"),
				"sweep_interval 30s",
				"log_key",
				"jitter 0.5",
			),
			want: &Handler{
				Zones:         zones(zone1(nil)),
				Distributed:   json.RawMessage(`{}`),
				Storage:       json.RawMessage(`{}`),
				SweepInterval: dur(30 * time.Second),
				LogKey:        true,
				Jitter:        0.5,
			},
		},
		{
			name:  "distributed without a block",
			input: minimal("distributed"),
			want:  &Handler{Zones: zones(zone1(nil)), Distributed: json.RawMessage(`{}`)},
		},
		{
			name: "every top-level option",
			input: minimal(
				"failure_mode closed",
				"headers ietf legacy x",
				"status 503",
				"dry_run",
				"log_key",
				"jitter 0.2",
			),
			want: &Handler{
				Zones:       zones(zone1(nil)),
				FailureMode: "closed",
				Headers:     []string{"ietf", "legacy", "x"},
				Status:      503,
				DryRun:      true,
				LogKey:      true,
				Jitter:      0.2,
			},
		},
		{
			name:  "failure_mode open",
			input: minimal("failure_mode open"),
			want:  &Handler{Zones: zones(zone1(nil)), FailureMode: "open"},
		},
		{
			// The contract: failure_mode open|closed|local.
			name:  "failure_mode local",
			input: minimal("failure_mode local"),
			want:  &Handler{Zones: zones(zone1(nil)), FailureMode: "local"},
		},
		{
			name:  "headers none",
			input: minimal("headers none"),
			want:  &Handler{Zones: zones(zone1(nil)), Headers: []string{"none"}},
		},
		{
			name:  "headers x only",
			input: minimal("headers x"),
			want:  &Handler{Zones: zones(zone1(nil)), Headers: []string{"x"}},
		},
		{
			name:  "status 429 and jitter bounds",
			input: minimal("status 429", "jitter 0"),
			want:  &Handler{Zones: zones(zone1(nil)), Status: 429},
		},
		{
			name:  "jitter 1",
			input: minimal("jitter 1"),
			want:  &Handler{Zones: zones(zone1(nil)), Jitter: 1},
		},
		{
			name: "redis with a url",
			input: minimal(`redis {
					url rediss://user:pass@redis.example:6380/2
					username sluice
					password {env.REDIS_PASSWORD}
					db 3
					tls
					tls_ca /etc/ssl/redis-ca.pem
					key_prefix rl:
					timeout 250ms
					pool_size 50
				}`),
			want: &Handler{
				Zones: zones(zone1(nil)),
				Redis: &RedisConfig{
					URL:       "rediss://user:pass@redis.example:6380/2",
					Username:  "sluice",
					Password:  "{env.REDIS_PASSWORD}",
					DB:        3,
					TLS:       true,
					TLSCA:     "/etc/ssl/redis-ca.pem",
					KeyPrefix: "rl:",
					Timeout:   dur(250 * time.Millisecond),
					PoolSize:  50,
				},
			},
		},
		{
			name: "redis cluster, tls insecure_skip_verify",
			input: minimal(`redis {
					addresses 10.0.0.1:6379 10.0.0.2:6379 10.0.0.3:6379
					tls insecure_skip_verify
				}`),
			want: &Handler{
				Zones: zones(zone1(nil)),
				Redis: &RedisConfig{
					Addresses:          []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
					TLS:                true,
					InsecureSkipVerify: true,
				},
			},
		},
		{
			name: "redis sentinel",
			input: minimal(`redis {
					addresses sentinel-1:26379 sentinel-2:26379
					master_name mymaster
					db 0
				}`),
			want: &Handler{
				Zones: zones(zone1(nil)),
				Redis: &RedisConfig{
					Addresses:  []string{"sentinel-1:26379", "sentinel-2:26379"},
					MasterName: "mymaster",
				},
			},
		},
		{
			name: "every zone option",
			input: zoneBlock(
				block("match", "method POST", "path /login /api/*"),
				"key {http.request.header.X-Tenant}:{method}{path}",
				"algorithm token_bucket",
				"events 100",
				"window 1m",
				"burst 120",
				"cost 5",
				"ipv4_prefix 24",
				"ipv6_prefix 64",
				"dry_run",
			),
			want: &Handler{Zones: zones(&Zone{
				MatcherSetsRaw: caddyhttp.RawMatcherSets{{
					"method": json.RawMessage(`["POST"]`),
					"path":   json.RawMessage(`["/login","/api/*"]`),
				}},
				Key:        "{http.request.header.X-Tenant}:{method}{path}",
				Algorithm:  "token_bucket",
				MaxEvents:  100,
				Window:     dur(time.Minute),
				Burst:      120,
				Cost:       "5",
				IPv4Prefix: 24,
				IPv6Prefix: 64,
				DryRun:     true,
			})},
		},
		{
			name:  "quota_lease in a zone",
			input: zoneBlock("key k", "events 100", "window 1s", "quota_lease 100ms"),
			want:  &Handler{Zones: zones(&Zone{Key: "k", MaxEvents: 100, Window: dur(time.Second), QuotaLease: dur(100 * time.Millisecond)})},
		},
		{
			name:  "quota_lease off in a zone",
			input: zoneBlock("key k", "events 100", "window 1s", "quota_lease off"),
			want:  &Handler{Zones: zones(&Zone{Key: "k", MaxEvents: 100, Window: dur(time.Second), QuotaLease: quotaLeaseOff})},
		},
		{
			name:  "quota_lease bounds: 1ms, and 10s in a longer window",
			input: rateLimit(zoneCfg("a", "key k", "events 1", "window 1ms", "quota_lease 1ms"), zoneCfg("b", "key k", "events 1", "window 1h", "quota_lease 10s")),
			want: &Handler{Zones: map[string]*Zone{
				"a": {Key: "k", MaxEvents: 1, Window: dur(time.Millisecond), QuotaLease: dur(time.Millisecond)},
				"b": {Key: "k", MaxEvents: 1, Window: dur(time.Hour), QuotaLease: dur(10 * time.Second)},
			}},
		},
		{
			name:  "quota_lease of a period zone",
			input: zoneBlock("key k", "events 100", "period day", "quota_lease 10s"),
			want:  &Handler{Zones: zones(&Zone{Key: "k", MaxEvents: 100, Period: "day", QuotaLease: dur(10 * time.Second)})},
		},
		{
			// the handler's is every zone's default, at most each zone's window
			name:  "quota_lease at handler level",
			input: rateLimit("quota_lease 2s", zoneCfg("z", "key k", "events 10", "window 1s")),
			want:  &Handler{Zones: zones(&Zone{Key: "k", MaxEvents: 10, Window: dur(time.Second)}), QuotaLease: dur(2 * time.Second)},
		},
		{
			name:  "quota_lease off at handler level",
			input: minimal("quota_lease off"),
			want:  &Handler{Zones: zones(zone1(nil)), QuotaLease: quotaLeaseOff},
		},
		{
			name:  "cost placeholder",
			input: zoneBlock("key {client_ip}", "events 1000", "window 1h", "cost {http.request.header.X-Cost}"),
			want: &Handler{Zones: zones(&Zone{
				Key: "{client_ip}", MaxEvents: 1000, Window: dur(time.Hour), Cost: "{http.request.header.X-Cost}",
			})},
		},
		{
			name:  "cost equal to events",
			input: zoneBlock("key k", "events 3", "window 1s", "cost 3"),
			want:  &Handler{Zones: zones(&Zone{Key: "k", MaxEvents: 3, Window: dur(time.Second), Cost: "3"})},
		},
		{
			name:  "cost up to burst for token_bucket",
			input: zoneBlock("key k", "algorithm token_bucket", "events 3", "window 1s", "burst 10", "cost 10"),
			want: &Handler{Zones: zones(&Zone{
				Key: "k", Algorithm: "token_bucket", MaxEvents: 3, Window: dur(time.Second), Burst: 10, Cost: "10",
			})},
		},
		{
			name:  "cost above events with overrides",
			input: zoneBlock("key k", "events 3", "window 1s", "overrides", "cost 5"),
			want:  &Handler{Zones: zones(&Zone{Key: "k", MaxEvents: 3, Window: dur(time.Second), Overrides: true, Cost: "5"})},
		},
		{
			name:  "window in days",
			input: zoneBlock("key k", "events 5", "window 1d"),
			want:  &Handler{Zones: zones(&Zone{Key: "k", MaxEvents: 5, Window: dur(24 * time.Hour)})},
		},
		{
			name: "every algorithm, several zones",
			input: rateLimit(
				zoneCfg("a", "key {client_ip}", "algorithm fixed_window", "events 1", "window 1s"),
				zoneCfg("b.c", "key {client_ip}", "algorithm sliding_window", "events 2", "window 2s"),
				zoneCfg("d_e", "key {client_ip}", "algorithm sliding_log", "events 3", "window 3s"),
				zoneCfg("F-9", "key {client_ip}", "algorithm token_bucket", "events 4", "window 4s"),
			),
			want: &Handler{Zones: map[string]*Zone{
				"a":   {Key: "{client_ip}", Algorithm: "fixed_window", MaxEvents: 1, Window: dur(time.Second)},
				"b.c": {Key: "{client_ip}", Algorithm: "sliding_window", MaxEvents: 2, Window: dur(2 * time.Second)},
				"d_e": {Key: "{client_ip}", Algorithm: "sliding_log", MaxEvents: 3, Window: dur(3 * time.Second)},
				"F-9": {Key: "{client_ip}", Algorithm: "token_bucket", MaxEvents: 4, Window: dur(4 * time.Second)},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parse(t, tt.input)
			if err != nil {
				t.Fatalf("UnmarshalCaddyfile: %v", err)
			}
			if g, w := toJSON(t, got), toJSON(t, tt.want); g != w {
				t.Errorf("parsed handler:\n got %s\nwant %s", g, w)
			}
		})
	}
}

// TestUnmarshalCaddyfileErrors checks that every bad input is rejected with
// a message that names the option and the Caddyfile line (the Validation
// rule of the Caddyfile's validation). Line numbers count from the "rate_limit {" line.
func TestUnmarshalCaddyfileErrors(t *testing.T) {
	tests := []struct {
		name  string
		input string
		// want are substrings the error must contain; the first is
		// normally the option's name.
		want []string
		line int
	}{
		// The directive itself.
		// Caddy's own ArgErr: it names the stray token, not the directive.
		{"argument after the directive", block("rate_limit foo", zoneCfg("z", tinyZone...)), []string{"foo"}, 1},
		{"no zone", rateLimit("failure_mode open"), []string{"at least one zone"}, 1},
		{"no zone, redis block", rateLimit(block("redis", "url redis://a:6379")), []string{"at least one zone"}, 1},
		{"empty directive", "rate_limit", []string{"at least one zone"}, 1},

		// Top level.
		{"unknown subdirective", minimal("bogus 1"), []string{"bogus", "unknown"}, 2},
		{"jwt-like typo", minimal("zones z"), []string{"zones", "unknown"}, 2},
		{"failure_mode repeated", minimal("failure_mode open", "failure_mode closed"), []string{"failure_mode", "more than once"}, 3},
		{"status repeated", minimal("status 429", "status 503"), []string{"status", "more than once"}, 3},
		{"dry_run repeated", minimal("dry_run", "dry_run"), []string{"dry_run", "more than once"}, 3},
		{"headers repeated", minimal("headers ietf", "headers x"), []string{"headers", "more than once"}, 3},
		{"redis repeated", minimal(block("redis", "url redis://a:6379"), block("redis", "url redis://b:6379")), []string{"redis", "more than once"}, 5},
		{"sweep_interval repeated", minimal("sweep_interval 1s", "sweep_interval 2s"), []string{"sweep_interval", "more than once"}, 3},
		{"failure_mode missing value", minimal("failure_mode"), []string{"failure_mode", "missing value"}, 2},
		{"failure_mode unknown", minimal("failure_mode sideways"), []string{"failure_mode", "sideways"}, 2},
		{"failure_mode too many values", minimal("failure_mode open closed"), []string{"failure_mode", "too many values"}, 2},
		{"headers missing value", minimal("headers"), []string{"headers"}, 2},
		{"headers bogus", minimal("headers bogus"), []string{"headers", "bogus"}, 2},
		{"headers ietf bogus", minimal("headers ietf bogus"), []string{"headers", "bogus"}, 2},
		{"headers none x", minimal("headers none x"), []string{"headers", "none"}, 2},
		{"headers style twice", minimal("headers ietf ietf"), []string{"headers", "ietf", "twice"}, 2},
		{"headers x none", minimal("headers x none"), []string{"headers", "none"}, 2},
		{"status 200", minimal("status 200"), []string{"status", "200"}, 2},
		{"status 600", minimal("status 600"), []string{"status", "600"}, 2},
		{"status abc", minimal("status abc"), []string{"status", "abc"}, 2},
		{"status missing value", minimal("status"), []string{"status", "missing value"}, 2},
		{"status too many values", minimal("status 429 503"), []string{"status", "too many values"}, 2},
		{"dry_run with a value", minimal("dry_run yes"), []string{"dry_run"}, 2},
		{"log_key with a value", minimal("log_key yes"), []string{"log_key"}, 2},
		{"jitter 2", minimal("jitter 2"), []string{"jitter", "2"}, 2},
		{"jitter -0.1", minimal("jitter -0.1"), []string{"jitter", "-0.1"}, 2},
		{"jitter abc", minimal("jitter abc"), []string{"jitter", "abc"}, 2},
		{"jitter missing value", minimal("jitter"), []string{"jitter", "missing value"}, 2},
		{"sweep_interval garbage", minimal("sweep_interval soon"), []string{"sweep_interval", "soon"}, 2},

		// Redis block.
		{"redis unknown subdirective", minimal(block("redis", "url redis://a:6379", "host a")), []string{"redis", "host", "unknown"}, 4},
		{"redis argument", minimal(block("redis redis://a:6379", "db 1")), []string{"redis"}, 2},
		{"redis url repeated", minimal(block("redis", "url redis://a:6379", "url redis://b:6379")), []string{"url", "more than once"}, 4},
		{"redis url missing value", minimal(block("redis", "url")), []string{"url", "missing value"}, 3},
		{"redis url too many values", minimal(block("redis", "url redis://a:6379 redis://b:6379")), []string{"url", "too many values"}, 3},
		{"redis url and addresses", minimal(block("redis", "url redis://a:6379", "addresses b:6379")), []string{"url", "addresses"}, 2},
		{"redis without url or addresses", minimal(block("redis", "db 1")), []string{"url", "addresses"}, 2},
		{"redis empty block", minimal("redis"), []string{"url", "addresses"}, 2},
		{"redis addresses missing value", minimal(block("redis", "addresses")), []string{"addresses", "missing value"}, 3},
		{"redis master_name missing value", minimal(block("redis", "addresses s:26379", "master_name")), []string{"master_name", "missing value"}, 4},
		{"redis username too many values", minimal(block("redis", "url redis://a:6379", "username a b")), []string{"username", "too many values"}, 4},
		{"redis password missing value", minimal(block("redis", "url redis://a:6379", "password")), []string{"password", "missing value"}, 4},
		{"redis db -1", minimal(block("redis", "url redis://a:6379", "db -1")), []string{"db", "-1"}, 4},
		{"redis db abc", minimal(block("redis", "url redis://a:6379", "db abc")), []string{"db", "abc"}, 4},
		{"redis tls bogus", minimal(block("redis", "url redis://a:6379", "tls bogus")), []string{"tls", "bogus"}, 4},
		{"redis tls too many values", minimal(block("redis", "url redis://a:6379", "tls insecure_skip_verify extra")), []string{"tls", "extra"}, 4},
		{"redis tls repeated", minimal(block("redis", "url redis://a:6379", "tls", "tls insecure_skip_verify")), []string{"tls", "more than once"}, 5},
		{"redis tls_ca missing value", minimal(block("redis", "url redis://a:6379", "tls_ca")), []string{"tls_ca", "missing value"}, 4},
		{"redis key_prefix missing value", minimal(block("redis", "url redis://a:6379", "key_prefix")), []string{"key_prefix", "missing value"}, 4},
		{"redis timeout 0", minimal(block("redis", "url redis://a:6379", "timeout 0")), []string{"timeout", "0"}, 4},
		{"redis timeout garbage", minimal(block("redis", "url redis://a:6379", "timeout fast")), []string{"timeout", "fast"}, 4},
		{"redis timeout -1s", minimal(block("redis", "url redis://a:6379", "timeout -1s")), []string{"timeout", "-1s"}, 4},
		{"redis pool_size 0", minimal(block("redis", "url redis://a:6379", "pool_size 0")), []string{"pool_size", "0"}, 4},
		{"redis key_prefix with braces", minimal(block("redis", "url redis://a:6379", "key_prefix {x}:")), []string{"key_prefix", "braces"}, 4},
		{"redis pool_size abc", minimal(block("redis", "url redis://a:6379", "pool_size abc")), []string{"pool_size", "abc"}, 4},
		{"redis url of another scheme", minimal(block("redis", "url http://a:6379")), []string{"url", "scheme"}, 3},

		// Zones.
		{"zone without name", rateLimit(block("zone", tinyZone...)), []string{"zone"}, 2},
		{"zone name with a space", rateLimit(zoneCfg("a b", tinyZone...)), []string{"zone"}, 2},
		{"zone name quoted with a space", rateLimit(zoneCfg(`"a b"`, tinyZone...)), []string{"zone", "name"}, 6},
		{"zone name with a brace", rateLimit(zoneCfg("a{b", tinyZone...)), []string{"zone", "name"}, 6},
		{"zone name with a quote", rateLimit(zoneCfg(`a\"b`, tinyZone...)), []string{"zone", "name"}, 6},
		{"zone name too long", rateLimit(zoneCfg(strings.Repeat("a", 65), tinyZone...)), []string{"zone", "name"}, 6},
		{"duplicate zone name", rateLimit(zoneCfg("z", tinyZone...), zoneCfg("z", "key k", "events 2", "window 1s")), []string{"zone z", "more than once"}, 7},
		{"zone unknown subdirective", zoneBlock("key k", "events 1", "window 1s", "limit 5"), []string{"limit", "unknown"}, 6},
		{"zone key repeated", zoneBlock("key k", "key j", "events 1", "window 1s"), []string{"zone z", "key", "more than once"}, 4},
		{"zone events repeated", zoneBlock("key k", "events 1", "events 2", "window 1s"), []string{"zone z", "events", "more than once"}, 5},
		{"zone match repeated", zoneBlock(block("match", "path /a"), block("match", "path /b"), "key k", "events 1", "window 1s"), []string{"match", "more than once"}, 6},
		{"zone dry_run with a value", zoneBlock("key k", "events 1", "window 1s", "dry_run yes"), []string{"dry_run"}, 6},
		{"zone without key", zoneBlock("events 1", "window 1s"), []string{"zone z", "key"}, 5},
		{"zone without events", zoneBlock("key k", "window 1s"), []string{"zone z", "events"}, 5},
		{"zone without window", zoneBlock("key k", "events 1"), []string{"zone z", "window"}, 5},
		{"zone without block", rateLimit("zone z"), []string{"zone z", "key"}, 2},
		{"key missing value", zoneBlock("key", "events 1", "window 1s"), []string{"key", "missing value"}, 3},
		{"key too many values", zoneBlock("key a b", "events 1", "window 1s"), []string{"key", "too many values"}, 3},
		{"events 0", zoneBlock("key k", "events 0", "window 1s"), []string{"events", "0"}, 4},
		{"events -1", zoneBlock("key k", "events -1", "window 1s"), []string{"events", "-1"}, 4},
		{"events abc", zoneBlock("key k", "events abc", "window 1s"), []string{"events", "abc"}, 4},
		{"events 1.5", zoneBlock("key k", "events 1.5", "window 1s"), []string{"events", "1.5"}, 4},
		{"events missing value", zoneBlock("key k", "events", "window 1s"), []string{"events", "missing value"}, 4},
		{"events too many values", zoneBlock("key k", "events 1 2", "window 1s"), []string{"events", "too many values"}, 4},
		{"events too large", zoneBlock("key k", "events 99999999999999999999", "window 1s"), []string{"events"}, 4},
		{"window 0", zoneBlock("key k", "events 1", "window 0"), []string{"window", "0"}, 5},
		{"window 0s", zoneBlock("key k", "events 1", "window 0s"), []string{"window", "0s"}, 5},
		{"window -1m", zoneBlock("key k", "events 1", "window -1m"), []string{"window", "-1m"}, 5},
		{"window garbage", zoneBlock("key k", "events 1", "window soon"), []string{"window", "soon"}, 5},
		{"window missing value", zoneBlock("key k", "events 1", "window"), []string{"window", "missing value"}, 5},
		{"window too short", zoneBlock("key k", "events 1", "window 1us"), []string{"zone z", "window"}, 6},
		{"window too long", zoneBlock("key k", "events 1", "window 400d"), []string{"zone z", "window"}, 6},
		{"unknown algorithm", zoneBlock("key k", "algorithm leaky_bucket", "events 1", "window 1s"), []string{"algorithm", "leaky_bucket"}, 4},
		{"algorithm missing value", zoneBlock("key k", "algorithm", "events 1", "window 1s"), []string{"algorithm", "missing value"}, 4},
		{"burst with the default algorithm", zoneBlock("key k", "events 1", "window 1s", "burst 5"), []string{"zone z", "burst: sliding_window has no burst", "token_bucket"}, 6},
		{"burst with fixed_window", zoneBlock("key k", "algorithm fixed_window", "events 1", "window 1s", "burst 5"), []string{"zone z", "burst: fixed_window has no burst"}, 7},
		{"burst with sliding_log", zoneBlock("key k", "algorithm sliding_log", "events 1", "window 1s", "burst 5"), []string{"zone z", "burst: sliding_log has no burst"}, 7},
		{"burst 0", zoneBlock("key k", "algorithm token_bucket", "events 1", "window 1s", "burst 0"), []string{"burst", "0"}, 7},
		{"burst abc", zoneBlock("key k", "algorithm token_bucket", "events 1", "window 1s", "burst abc"), []string{"burst", "abc"}, 7},
		// Limits per request: events/burst <placeholder> <n>.
		{"events placeholder without fallback", zoneBlock("key k", "events {jwt.limit}", "window 1s"), []string{"events", "{jwt.limit}"}, 4},
		{"events fallback 0", zoneBlock("key k", "events {jwt.limit} 0", "window 1s"), []string{"events", "0"}, 4},
		{"events fallback above 10^9", zoneBlock("key k", "events {jwt.limit} 1000000001", "window 1s"), []string{"events", "1000000001"}, 4},
		{"events fallback abc", zoneBlock("key k", "events {jwt.limit} abc", "window 1s"), []string{"events", "abc"}, 4},
		{"events placeholder not a placeholder", zoneBlock("key k", "events plan 5", "window 1s"), []string{"events", "plan", "not a placeholder"}, 4},
		{"events placeholder three values", zoneBlock("key k", "events {a} 5 6", "window 1s"), []string{"events", "too many values"}, 4},
		{"events placeholder repeated", zoneBlock("key k", "events {a} 5", "events 6", "window 1s"), []string{"events", "more than once"}, 5},
		{"sliding_log fallback above 10000", zoneBlock("key k", "algorithm sliding_log", "events {a} 10001", "window 1s"), []string{"zone z", "events", "sliding_window"}, 5},
		{"burst placeholder without fallback", zoneBlock("key k", "algorithm token_bucket", "events 1", "window 1s", "burst {jwt.burst}"), []string{"burst", "{jwt.burst}"}, 7},
		{"burst placeholder fallback 0", zoneBlock("key k", "algorithm token_bucket", "events 1", "window 1s", "burst {jwt.burst} 0"), []string{"burst", "0"}, 7},
		{"burst placeholder not a placeholder", zoneBlock("key k", "algorithm token_bucket", "events 1", "window 1s", "burst b 5"), []string{"burst", "not a placeholder"}, 7},
		{"cost above 10^9 with overrides", zoneBlock("key k", "events 5", "window 1s", "overrides", "cost 1000000001"), []string{"zone z", "cost", "1000000001"}, 8},
		{"cost above 10^9 with events per request", zoneBlock("key k", "events {a} 5", "window 1s", "cost 1000000001"), []string{"zone z", "cost", "1000000001"}, 7},
		{"burst placeholder with sliding_window", zoneBlock("key k", "events 1", "window 1s", "burst {b} 5"), []string{"zone z", "burst: sliding_window has no burst"}, 6},
		{"events above 10^9", zoneBlock("key k", "events 4503599627", "window 366d"), []string{"events", "1000000000"}, 4},
		{"cost 0", zoneBlock("key k", "events 5", "window 1s", "cost 0"), []string{"zone z", "cost", "0"}, 6},
		{"cost -3", zoneBlock("key k", "events 5", "window 1s", "cost -3"), []string{"zone z", "cost", "-3"}, 6},
		{"cost abc", zoneBlock("key k", "events 5", "window 1s", "cost abc"), []string{"zone z", "cost", "abc"}, 6},
		{"cost missing value", zoneBlock("key k", "events 5", "window 1s", "cost"), []string{"cost", "missing value"}, 6},
		{"cost larger than events", zoneBlock("key k", "events 5", "window 1s", "cost 6"), []string{"zone z", "cost", "6"}, 7},
		{"cost larger than burst", zoneBlock("key k", "algorithm token_bucket", "events 5", "window 1s", "burst 8", "cost 9"), []string{"zone z", "cost", "9"}, 9},
		{"ipv4_prefix 33", zoneBlock("key k", "events 1", "window 1s", "ipv4_prefix 33"), []string{"ipv4_prefix", "33"}, 6},
		{"ipv4_prefix -1", zoneBlock("key k", "events 1", "window 1s", "ipv4_prefix -1"), []string{"ipv4_prefix", "-1"}, 6},
		{"ipv4_prefix abc", zoneBlock("key k", "events 1", "window 1s", "ipv4_prefix abc"), []string{"ipv4_prefix", "abc"}, 6},
		{"ipv6_prefix 129", zoneBlock("key k", "events 1", "window 1s", "ipv6_prefix 129"), []string{"ipv6_prefix", "129"}, 6},
		{"ipv6_prefix missing value", zoneBlock("key k", "events 1", "window 1s", "ipv6_prefix"), []string{"ipv6_prefix", "missing value"}, 6},
		{"quota_lease 0", zoneBlock("key k", "events 1", "window 1s", "quota_lease 0"), []string{"quota_lease", "1ms", "10s", "off", `"0"`}, 6},
		{"quota_lease under 1ms", zoneBlock("key k", "events 1", "window 1s", "quota_lease 500us"), []string{"quota_lease", "500us"}, 6},
		{"quota_lease above 10s", zoneBlock("key k", "events 1", "window 1h", "quota_lease 11s"), []string{"quota_lease", "10s", "11s"}, 6},
		{"quota_lease negative", zoneBlock("key k", "events 1", "window 1s", "quota_lease -1s"), []string{"quota_lease", "-1s"}, 6},
		{"quota_lease garbage", zoneBlock("key k", "events 1", "window 1s", "quota_lease on"), []string{"quota_lease", `"on"`}, 6},
		{"quota_lease missing value", zoneBlock("key k", "events 1", "window 1s", "quota_lease"), []string{"quota_lease", "missing value"}, 6},
		{"quota_lease too many values", zoneBlock("key k", "events 1", "window 1s", "quota_lease 1s off"), []string{"quota_lease", "too many values"}, 6},
		{"quota_lease repeated", zoneBlock("key k", "events 1", "window 1s", "quota_lease 1s", "quota_lease off"), []string{"zone z", "quota_lease", "more than once"}, 7},
		// the window bound is the zone's: checked with the zone, at its end,
		// and reported at the option's line
		{"quota_lease above the window", zoneBlock("key k", "events 1", "window 100ms", "quota_lease 200ms"), []string{"zone z", "quota_lease", "window", "100ms", "200ms"}, 6},
		{"handler quota_lease above 10s", minimal("quota_lease 1m"), []string{"quota_lease", "10s", "1m"}, 2},
		{"handler quota_lease 0", minimal("quota_lease 0s"), []string{"quota_lease", "0s"}, 2},
		{"handler quota_lease repeated", minimal("quota_lease 1s", "quota_lease off"), []string{"quota_lease", "more than once"}, 3},
		// Caddy's matcher parser reports the end of the match block.
		{"match unknown matcher", zoneBlock(block("match", "nosuchmatcher x"), "key k", "events 1", "window 1s"), []string{"nosuchmatcher"}, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantParseError(t, tt.input, tt.want, tt.line) })
	}
}

// TestUnmarshalCaddyfileJSONNames checks that the parsed handler encodes
// with mholt/caddy-ratelimit's JSON field names, and that the JSON decodes
// back to the same configuration.
func TestUnmarshalCaddyfileJSONNames(t *testing.T) {
	h, err := parse(t, rateLimit(zoneCfg("api",
		block("match", "path /api/*"),
		"key {http.request.header.X-API-Key}",
		"events 100",
		"window 1m",
	)))
	if err != nil {
		t.Fatalf("UnmarshalCaddyfile: %v", err)
	}
	encoded := toJSON(t, h)
	for _, name := range []string{`"rate_limits":{"api":`, `"max_events":100`, `"window":60000000000`, `"key":"{http.request.header.X-API-Key}"`, `"match":[{"path":["/api/*"]}]`} {
		if !strings.Contains(encoded, name) {
			t.Errorf("JSON %s does not contain %s", encoded, name)
		}
	}
	var decoded Handler
	if err := json.Unmarshal([]byte(encoded), &decoded); err != nil {
		t.Fatalf("decoding %s: %v", encoded, err)
	}
	if got := toJSON(t, &decoded); got != encoded {
		t.Errorf("JSON round trip:\n got %s\nwant %s", got, encoded)
	}
}

// TestRedisPasswordPlaceholder checks the documented "{env.REDIS_PASSWORD}
// works" for password: the placeholder reaches go-redis expanded.
func TestRedisPasswordPlaceholder(t *testing.T) {
	t.Setenv("SLUICE_TEST_REDIS_PASSWORD", "s3cret")
	h, err := parse(t, minimal(block("redis", "url redis://127.0.0.1:6379/0", "password {env.SLUICE_TEST_REDIS_PASSWORD}")))
	if err != nil {
		t.Fatalf("UnmarshalCaddyfile: %v", err)
	}
	opts, err := h.Redis.options()
	if err != nil {
		t.Fatalf("options: %v", err)
	}
	if got, want := opts.Password, "s3cret"; got != want {
		t.Errorf("redis password: got %q, want %q", got, want)
	}
}
