package sluice

import (
	"testing"
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
