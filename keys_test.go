package sluice

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dunglas/httpsfv"
	"github.com/sluicehq/caddy-sluice/algorithms"
)

// Tests of how a zone's key groups clients: ipv4_prefix and ipv6_prefix.

func TestServeHTTPIPPrefix(t *testing.T) {
	type step struct {
		remote  string
		allowed bool
	}
	grouped := []step{
		{"203.0.113.5:1000", true},
		{"203.0.113.77:1000", false}, // same /24
		{"203.0.114.5:1000", true},   // another /24
		{"[2001:db8::1]:1000", true},
		{"[2001:db8::ffff]:1000", false}, // same /64
		{"[2001:db8:1::1]:1000", true},   // another /64
	}
	whole := []step{
		{"203.0.113.5:1000", true},
		{"203.0.113.77:1000", true}, // no prefix: each address alone
		{"203.0.113.5:2000", false}, // same address, other port
		{"[2001:db8::1]:1000", true},
		{"[2001:db8::ffff]:1000", true},
	}
	tests := []struct {
		name     string
		key      string
		prefixes string
		steps    []step
	}{
		{"remote host grouped", "{http.request.remote.host}", "ipv4_prefix 24\n ipv6_prefix 64", grouped},
		{"client_ip grouped", "{http.vars.client_ip}", "ipv4_prefix 24\n ipv6_prefix 64", grouped},
		{"client_ip in a longer key", "ip:{http.vars.client_ip}:x", "ipv4_prefix 24\n ipv6_prefix 64", grouped},
		{"remote host whole", "{http.request.remote.host}", "", whole},
		{"client_ip whole", "{http.vars.client_ip}", "", whole},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			zone := uniqueZone("ip")
			h := newHandler(t, rateLimit(zoneCfg(zone, "key "+tt.key, "algorithm sliding_log", "events 1", "window 1h", tt.prefixes)))
			for i, s := range tt.steps {
				res := serve(t, h, reqOpts{remote: s.remote})
				if got := res.allowed(); got != s.allowed {
					t.Errorf("step %d (%s): allowed = %v (err %v), want %v", i, s.remote, got, res.err, s.allowed)
				}
			}
		})
	}
}

// TestExpandOnePlaceholder: a key of one placeholder expands exactly as
// Replacer.ReplaceAll expands it; other templates take ReplaceAll itself.
func TestExpandOnePlaceholder(t *testing.T) {
	tests := []struct {
		key     string
		keyVar  string // what singlePlaceholder must find
		want    string
		comment string
	}{
		{"{http.request.header.X-Key}", "http.request.header.X-Key", "tenant-1", "header"},
		{"{http.request.header.X-Missing}", "http.request.header.X-Missing", "", "empty header"},
		{"{no.such.placeholder}", "no.such.placeholder", "", "unknown"},
		{"{http.request.method}", "http.request.method", "GET", "method"},
		{"k:{http.request.header.X-Key}", "", "k:tenant-1", "not alone"},
		{"{http.request.method}{http.request.header.X-Key}", "", "GETtenant-1", "two"},
		{"{a\\}b}", "", "", "escaped brace"},
		{"{file./nonexistent}", "", "", "file"},
		{"plain", "", "plain", "no placeholder"},
	}
	req := httptest.NewRequest(http.MethodGet, "http://example.com/", nil)
	req.Header.Set("X-Key", "tenant-1")
	repl := caddy.NewReplacer()
	caddyhttp.PrepareRequest(req, repl, httptest.NewRecorder(), nil)
	for _, tt := range tests {
		t.Run(tt.comment, func(t *testing.T) {
			if got := singlePlaceholder(tt.key); got != tt.keyVar {
				t.Errorf("singlePlaceholder(%q) = %q, want %q", tt.key, got, tt.keyVar)
			}
			z := &Zone{Key: tt.key, keyVar: singlePlaceholder(tt.key)}
			got, want := z.expand(repl), repl.ReplaceAll(tt.key, "")
			if got != want {
				t.Errorf("expand(%q) = %q, want ReplaceAll's %q", tt.key, got, want)
			}
			if tt.keyVar != "" && got != tt.want {
				t.Errorf("expand(%q) = %q, want %q", tt.key, got, tt.want)
			}
		})
	}
}

// wantPK is the partition key of expanded in a zone of algorithm: the
// first 16 bytes of SHA-256 over the algorithm, a NUL and the key.
func wantPK(algorithm, expanded string) []byte {
	sum := sha256.Sum256([]byte(algorithm + "\x00" + expanded))
	return sum[:16]
}

func TestKeyHash(t *testing.T) {
	tests := []struct {
		prefix, algorithm, key string
	}{
		{"sluice:api:", "sliding_window", "tenant-42:203.0.113.7:GET/api"},
		{"", "fixed_window", ""},
		{"odd{prefix}:z:", "token_bucket", "{}}{"},
		{"p:z:", "sliding_log", strings.Repeat("k", 1000)},
	}
	for _, tt := range tests {
		t.Run(tt.prefix+tt.algorithm, func(t *testing.T) {
			z := &Zone{keyPrefix: tt.prefix, limit: algorithms.Limit{Algorithm: algorithms.Algorithm(tt.algorithm)}}
			hash := keyHash(z.storeKey(tt.key))
			got, err := base64.RawStdEncoding.DecodeString(hash)
			if err != nil {
				t.Fatalf("keyHash = %q: %v", hash, err)
			}
			if want := wantPK(tt.algorithm, tt.key); string(got) != string(want) {
				t.Errorf("keyHash decodes to %x, want %x", got, want)
			}
		})
	}
	for _, bad := range []string{"", "sluice:api:", "sluice:api:{short}", "x:{" + strings.Repeat("A", hashTagLen) + "}" + "{", "x:{" + strings.Repeat("A", hashTagLen)} {
		if got := keyHash(bad); got != "" {
			t.Errorf("keyHash(%q) = %q, want \"\"", bad, got)
		}
	}
}

// rateLimitPKs parses a RateLimit field with an RFC 8941 parser and
// returns each member's pk by zone name (nil where a member has none).
func rateLimitPKs(t *testing.T, field string) map[string][]byte {
	t.Helper()
	list, err := httpsfv.UnmarshalList([]string{field})
	if err != nil {
		t.Fatalf("RateLimit %q: %v", field, err)
	}
	pks := make(map[string][]byte)
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		if !ok {
			t.Fatalf("RateLimit %q: member %v is no item", field, m)
		}
		name, ok := item.Value.(string)
		if !ok {
			t.Fatalf("RateLimit %q: member %v is no string", field, item.Value)
		}
		pks[name] = nil
		if v, ok := item.Params.Get("pk"); ok {
			b, ok := v.([]byte)
			if !ok {
				t.Fatalf("RateLimit %q: pk of %s is %T, want a byte sequence", field, name, v)
			}
			pks[name] = b
		}
	}
	return pks
}

// TestHeadersPK checks the pk parameter of each RateLimit member: the
// hash of that zone's key, on allowed and denied responses, the same for
// one client and different for two; absent without the pk style.
func TestHeadersPK(t *testing.T) {
	tests := []struct {
		name    string
		headers string
		pk      bool
	}{
		{"ietf pk", "headers ietf pk", true},
		{"ietf legacy x pk", "headers ietf legacy x pk", true},
		{"ietf", "headers ietf", false},
		{"default", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logZone, fixedZone := uniqueZone("pklog"), uniqueZone("pkfixed")
			h := newHandler(t, fmt.Sprintf(`rate_limit {
				%s
				zone %s {
					key {http.request.remote.host}
					algorithm sliding_log
					events 2
					window 1m
				}
				zone %s {
					key {http.request.remote.host}
					algorithm fixed_window
					events 100
					window 1m
				}
			}`, tt.headers, logZone, fixedZone))
			algorithm := map[string]string{logZone: "sliding_log", fixedZone: "fixed_window"}
			clients := []string{"192.0.2.1", "192.0.2.1", "198.51.100.9", "192.0.2.1"} // the last is denied
			seen := make(map[string]string)                                            // pk → client
			for i, client := range clients {
				res := serve(t, h, reqOpts{remote: client + ":1234"})
				if denied := i == len(clients)-1; denied == res.allowed() {
					t.Fatalf("request %d from %s: allowed %v, want %v", i, client, res.allowed(), !denied)
				}
				if strings.Contains(res.header("RateLimit-Policy"), "pk=") {
					t.Errorf("RateLimit-Policy = %q, want no pk", res.header("RateLimit-Policy"))
				}
				pks := rateLimitPKs(t, res.header("RateLimit"))
				if len(pks) != 2 {
					t.Fatalf("RateLimit %q: %d members, want 2", res.header("RateLimit"), len(pks))
				}
				for zone, pk := range pks {
					if !tt.pk {
						if pk != nil {
							t.Errorf("%s: pk = %x, want none", zone, pk)
						}
						continue
					}
					if want := wantPK(algorithm[zone], client); string(pk) != string(want) {
						t.Errorf("request %d, %s: pk = %x, want %x", i, zone, pk, want)
					}
					if other, ok := seen[string(pk)]; ok && other != client {
						t.Errorf("pk %x for both %s and %s", pk, other, client)
					}
					seen[string(pk)] = client
				}
			}
			if tt.pk && len(seen) != 4 {
				t.Errorf("distinct pks = %d, want 4 (2 clients × 2 zones)", len(seen))
			}
		})
	}
}

func BenchmarkHeadersPK(b *testing.B) {
	limit := algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 100, Window: time.Minute}
	zones := []*Zone{
		{name: "api", keyPrefix: "sluice:api:", limit: limit, policy: policyMember("api", limit)},
		{name: "ip", keyPrefix: "sluice:ip:", limit: limit, policy: policyMember("ip", limit)},
	}
	reqs := []algorithms.Request{{Key: zones[0].storeKey("tenant-42")}, {Key: zones[1].storeKey("203.0.113.7")}}
	ds := []algorithms.Decision{{Allowed: true, Remaining: 42, ResetAfter: 18 * time.Second}, {Allowed: true, Remaining: 7, ResetAfter: time.Second}}
	for _, s := range []struct {
		name   string
		styles headerStyles
	}{{"ietf_legacy", styleIETF | styleLegacy}, {"ietf_legacy_pk", styleIETF | styleLegacy | stylePK}} {
		b.Run(s.name, func(b *testing.B) {
			h := http.Header{}
			now := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				clear(h)
				s.styles.writeAll(h, &verdict{zones: zones, reqs: reqs, ds: ds}, now, 0)
			}
		})
	}
}

// FuzzStoreKey: whatever a client puts in a key, the Redis key keeps the
// zone's prefix, holds exactly one hash tag and has a fixed length.
func FuzzStoreKey(f *testing.F) {
	f.Add("203.0.113.7")
	f.Add("{tag}}{")
	f.Add(strings.Repeat("\x00\xff", 64))
	z := &Zone{name: "fuzz", keyPrefix: "sluice:fuzz:", IPv4Prefix: 24, IPv6Prefix: 64,
		limit: algorithms.Limit{Algorithm: algorithms.SlidingWindow}}
	want := len(z.storeKey(""))
	f.Fuzz(func(t *testing.T, expanded string) {
		key := z.storeKey(expanded)
		if len(key) != want || !strings.HasPrefix(key, "sluice:fuzz:{") || strings.Count(key, "{") != 1 || strings.Count(key, "}") != 1 {
			t.Fatalf("key for %q: %q", expanded, key)
		}
		_ = z.network(expanded) // never panics on any address-like input
	})
}

// TestStorePrefix: a zone's store prefix is the key_prefix its keys start
// with, whatever the zone's name (one that ends like the prefix too).
func TestStorePrefix(t *testing.T) {
	tests := []struct{ prefix, name string }{
		{"sluice:", "api"},
		{"", "api"},
		{"tenant:api:", "api"},
	}
	for _, tt := range tests {
		z := &Zone{name: tt.name, keyPrefix: tt.prefix + tt.name + ":"}
		if got := z.storePrefix(); got != tt.prefix {
			t.Errorf("zone %q under %q: storePrefix() = %q, want %q", tt.name, tt.prefix, got, tt.prefix)
		}
	}
}
