package sluice

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// zoneBlock is a rate_limit directive with one zone of the given lines.
func settleZone(lines ...string) string {
	return "rate_limit {\n\tzone z {\n\t\t" + strings.Join(lines, "\n\t\t") + "\n\t}\n}"
}

func TestUnmarshalSettleOptions(t *testing.T) {
	tests := []struct {
		name         string
		input        string
		countStatus  []string
		costFromResp string
		algorithm    string
	}{
		{"count_status codes and classes", settleZone("key k", "events 5", "window 1m", "count_status 401 403 5xx"),
			[]string{"401", "403", "5xx"}, "", ""},
		{"cost_from_response", settleZone("key k", "events 100000", "window 1h", "cost 500", "cost_from_response {http.response.header.X-Usage-Tokens}"),
			nil, "{http.response.header.X-Usage-Tokens}", ""},
		{"concurrency without window", settleZone("key k", "algorithm concurrency", "events 10"),
			nil, "", "concurrency"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := new(Handler)
			if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tt.input)); err != nil {
				t.Fatal(err)
			}
			z := h.Zones["z"]
			if !slices.Equal(z.CountStatus, tt.countStatus) || z.CostFromResponse != tt.costFromResp || z.Algorithm != tt.algorithm {
				t.Errorf("got count_status %v, cost_from_response %q, algorithm %q; want %v, %q, %q",
					z.CountStatus, z.CostFromResponse, z.Algorithm, tt.countStatus, tt.costFromResp, tt.algorithm)
			}
		})
	}
}

func TestUnmarshalSettleOptionErrors(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  []string // substrings of the error; the first names the option
		line  int
	}{
		{"count_status missing value", settleZone("key k", "events 5", "window 1m", "count_status"), []string{"count_status", "missing value"}, 6},
		{"count_status code too high", settleZone("key k", "events 5", "window 1m", "count_status 401 600"), []string{"count_status", "600"}, 6},
		{"count_status code too low", settleZone("key k", "events 5", "window 1m", "count_status 99"), []string{"count_status", "99"}, 6},
		{"count_status class 6xx", settleZone("key k", "events 5", "window 1m", "count_status 6xx"), []string{"count_status", "6xx"}, 6},
		{"count_status word", settleZone("key k", "events 5", "window 1m", "count_status failed"), []string{"count_status", "failed"}, 6},
		{"count_status repeated", settleZone("key k", "events 5", "window 1m", "count_status 401", "count_status 403"), []string{"count_status", "more than once"}, 7},
		{"cost_from_response missing value", settleZone("key k", "events 5", "window 1m", "cost_from_response"), []string{"cost_from_response", "missing value"}, 6},
		{"cost_from_response not a placeholder", settleZone("key k", "events 5", "window 1m", "cost_from_response tokens"), []string{"cost_from_response", "placeholder"}, 7},
		{"concurrency with cost", settleZone("key k", "algorithm concurrency", "events 5", "cost 2"), []string{"cost", "concurrency"}, 7},
		{"concurrency with count_status", settleZone("key k", "algorithm concurrency", "events 5", "count_status 401"), []string{"count_status", "concurrency"}, 7},
		{"concurrency with cost_from_response", settleZone("key k", "algorithm concurrency", "events 5", "cost_from_response {x}"), []string{"cost_from_response", "concurrency"}, 7},
		{"concurrency with burst", settleZone("key k", "algorithm concurrency", "events 5", "burst 6"), []string{"burst"}, 7},
		{"unknown algorithm names concurrency", settleZone("key k", "algorithm inflight", "events 5"), []string{"algorithm", "concurrency"}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantParseError(t, tt.input, tt.want, tt.line) })
	}
}

// TestConcurrencyZoneSetup: the default window, and the policy member
// without w.
func TestConcurrencyZoneSetup(t *testing.T) {
	z := &Zone{Key: "k", Algorithm: "concurrency", MaxEvents: 10}
	if err := z.setup("inflight"); err != nil {
		t.Fatal(err)
	}
	if err := z.validate(); err != nil {
		t.Fatal(err)
	}
	if got, want := z.limit.Window, time.Minute; got != want {
		t.Errorf("got window %v, want %v", got, want)
	}
	if got, want := z.policy, `"inflight";q=10;qu="concurrent-requests"`; got != want {
		t.Errorf("got policy %s, want %s", got, want)
	}
}
