package sluice_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// adaptText adapts a Caddyfile given as text to JSON, failing on errors
// and warnings, but for Caddy's "not formatted" (mholt's README aligns
// values with spaces, which caddy fmt would not): cosmetic, and Caddy
// gives it for mholt's own plugin too.
func adaptText(t *testing.T, name, caddyfile string) []byte {
	t.Helper()
	out, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), map[string]any{"filename": name})
	if err != nil {
		t.Fatalf("adapting %s: %v\n%s", name, err, caddyfile)
	}
	for _, w := range warnings {
		if !strings.Contains(w.Message, "not formatted") {
			t.Errorf("adapting %s: warning: %s", name, w.String())
		}
	}
	return out
}

// TestMholtCaddyfiles: mholt/caddy-ratelimit's README Caddyfiles (its
// example, its network prefix example, its route and order examples, and
// its syntax with every option it has, disable_metrics, ipv4_prefix and
// ipv6_prefix among them) adapt unchanged and the JSON loads (Provision
// and Validate).
func TestMholtCaddyfiles(t *testing.T) {
	tests := []struct {
		name      string
		caddyfile string
		want      []string // substrings of the adapted JSON
	}{
		{"README example", `:80

rate_limit {
	distributed
	zone static_example {
		match {
			method GET
		}
		key    static
		events 100
		window 1m
	}
	zone dynamic_example {
		key    {remote_host}
		events 2
		window 5s
	}
	log_key
}

respond "I'm behind the rate limiter!"
`, []string{`"static_example":{`, `"dynamic_example":{`, `"max_events":100`, `"log_key":true`, `"distributed":{}`}},
		{"network prefix example", `:80

rate_limit {
	zone per_network {
		key         {remote_host}
		events      100
		window      1m
		ipv6_prefix 64
	}
}
`, []string{`"per_network":{`, `"ipv6_prefix":64`}},
		{"every option of its syntax", `:80

rate_limit {
	zone api {
		match {
			path /api/*
		}
		key         {remote_host}
		window      1m
		events      10
		ipv4_prefix 0
		ipv6_prefix 0
	}
	distributed {
		read_interval  5s
		write_interval 5s
		purge_age 1m
	}
	log_key
	disable_metrics
	storage file_system /tmp/caddy-ratelimit
	jitter  0.2
	sweep_interval 1m
}
`, []string{`"api":{`, `"disable_metrics":true`, `"jitter":0.2`, `"sweep_interval":60000000000`}},
		{"storage with a block", `:80

rate_limit {
	zone z {
		key    static
		events 1
		window 1s
	}
	storage file_system {
		root /tmp/caddy-ratelimit
	}
}
`, []string{`"storage":{}`}},
		{"order after basic_auth", `{
	order rate_limit after basic_auth
}

:80

rate_limit {
	zone z {
		key    {remote_host}
		events 2
		window 5s
	}
}
`, []string{`"handler":"rate_limit"`}},
		{"in a route", `:80

route {
	respond /ping "pong"

	rate_limit {
		zone z {
			key    {client_ip}
			events 2
			window 5s
		}
	}

	respond "critical"
}
`, []string{`"handler":"rate_limit"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := adaptText(t, "Caddyfile", tt.caddyfile)
			for _, w := range tt.want {
				if !bytes.Contains(got, []byte(w)) {
					t.Errorf("adapted JSON lacks %s:\n%s", w, got)
				}
			}
			if err := validate(t, got); err != nil {
				t.Errorf("caddy.Validate: %v", err)
			}
		})
	}
}

// TestMholtJSON: mholt/caddy-ratelimit's README JSON example, and its
// handler's fields with values, load unchanged.
func TestMholtJSON(t *testing.T) {
	example := `{"apps": {"http": {"servers": {"demo": {"listen": [":80"], "routes": [{"handle": [
		{"handler": "rate_limit",
		 "rate_limits": {
			"static_example": {"match": [{"method": ["GET"]}], "key": "static", "window": "1m", "max_events": 100},
			"dynamic_example": {"key": "{http.request.remote.host}", "window": "5s", "max_events": 2}},
		 "distributed": {},
		 "log_key": true},
		{"handler": "static_response", "body": "I'm behind the rate limiter!"}]}]}}}}}`
	every := `{"apps": {"http": {"servers": {"demo": {"listen": [":80"], "routes": [{"handle": [
		{"handler": "rate_limit",
		 "rate_limits": {"z": {"match": [], "key": "{http.request.remote.host}", "window": "1m", "max_events": 10, "ipv4_prefix": 0, "ipv6_prefix": 64}},
		 "jitter": 0.2, "sweep_interval": "1m", "log_key": false, "disable_metrics": true,
		 "storage": {"module": "file_system", "root": "/tmp/caddy-ratelimit"},
		 "distributed": {"write_interval": "5s", "read_interval": "5s", "purge_age": "1m"}}]}]}}}}}`
	for name, config := range map[string]string{"README example": example, "every field": every} {
		var compact bytes.Buffer
		if err := json.Compact(&compact, []byte(config)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := validate(t, compact.Bytes()); err != nil {
			t.Errorf("%s: caddy.Validate: %v", name, err)
		}
	}
}
