package sluice

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

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
