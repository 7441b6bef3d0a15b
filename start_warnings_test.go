package sluice

import (
	"strings"
	"testing"
)

// TestStartWarnings: a caddy-ratelimit Caddyfile that asks for distributed
// without a redis block gets one warning, which names the missing block
// and never claims a global count.
func TestStartWarnings(t *testing.T) {
	const zone = "zone z {\n\t\tkey {remote_host}\n\t\tevents 1\n\t\twindow 1m\n\t}"
	const redis = "redis {\n\t\turl redis://127.0.0.1:6379\n\t}"
	tests := []struct {
		name, options string
		want          []string // what each warning contains, in order
	}{
		{"distributed without redis", "distributed", []string{"distributed asks for one limit shared by every instance, but this rate_limit has no redis block"}},
		{"distributed with options without redis", "distributed {\n\t\tread_interval 1s\n\t}\n\tsweep_interval 1m", []string{"no redis block"}},
		{"storage without redis", "storage", []string{"ignored", "no redis block"}},
		{"no redis", "", []string{"no redis block"}},
		{"distributed with redis", "distributed\n\t" + redis, []string{"ignored: Redis keeps one global count"}},
		{"redis", redis, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			input := "rate_limit {\n\t" + tt.options + "\n\t" + zone + "\n}"
			h, err := parse(t, input)
			if err != nil {
				t.Fatalf("parsing: %v\n%s", err, input)
			}
			got := h.startWarnings(h.Redis != nil)
			if len(got) != len(tt.want) {
				t.Fatalf("got warnings %q, want %d", got, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("warning %d: got %q, want it to contain %q", i, got[i], w)
				}
				if h.Redis == nil && strings.Contains(got[i], "global") {
					t.Errorf("warning %d: got %q, which claims a global count without redis", i, got[i])
				}
			}
		})
	}
}
