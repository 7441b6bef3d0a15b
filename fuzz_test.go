package sluice

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// FuzzUnmarshalCaddyfile: no input, however malformed, panics the parser.
func FuzzUnmarshalCaddyfile(f *testing.F) {
	f.Add(rateLimit(zoneCfg("api", "key {client_ip}", "events 10", "window 1m")))
	f.Add(rateLimit(block("redis", "url redis://x", "tls insecure_skip_verify"), block("jwt", "from header X", "secret s")))
	f.Add(rateLimit(block("distributed", "read_interval 1s"), block("storage file_system", "root /x")))
	f.Add(rateLimit(zoneCfg("z", block("match", "path /a"), "cost {http.request.header.C}")))
	f.Fuzz(func(t *testing.T, input string) {
		var h Handler
		_ = h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
	})
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
