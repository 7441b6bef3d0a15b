package sluice

import (
	"testing"
)

// TestCaddyfileLimitErrors: the bounds on events, burst and cost fail
// parsing with the option named and the file:line.
func TestCaddyfileLimitErrors(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  []string // substrings of the error, the option's name first
		line  int
	}{
		{"events above 10^9", zoneBlock("key k", "events 1000000001", "window 1m"), []string{"events", "1000000000"}, 4},
		{"events 2^52", zoneBlock("key k", "events 4503599627370496", "window 1m"), []string{"events", "1000000000"}, 4},
		{"burst above 10^9", zoneBlock("key k", "algorithm token_bucket", "events 10", "window 1m", "burst 1000000001"), []string{"burst", "1000000000"}, 7},
		// the zone is checked as a whole once its block ends
		{"sliding_log above 10,000", zoneBlock("key k", "algorithm sliding_log", "events 10001", "window 1m"), []string{"events", "10000", "sliding_window"}, 7},
		{"sliding_log before the algorithm", zoneBlock("key k", "events 10001", "window 1m", "algorithm sliding_log"), []string{"events", "10000", "sliding_window"}, 7},
		{"static cost above int64", zoneBlock("key k", "events 10", "window 1m", "cost 99999999999999999999"), []string{"cost", "exceeds"}, 7},
		{"static cost above capacity", zoneBlock("key k", "algorithm token_bucket", "events 10", "burst 20", "window 1m", "cost 21"), []string{"cost", "exceeds"}, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantParseError(t, tt.input, tt.want, tt.line) })
	}
}

// TestCaddyfileLargeLimits: daily, monthly and yearly plans and 10^9 a
// minute parse and validate on every algorithm that takes them.
func TestCaddyfileLargeLimits(t *testing.T) {
	tests := []struct{ algorithm, events, window, burst string }{
		{"sliding_window", "100000", "24h", ""},
		{"token_bucket", "100000", "24h", ""},
		{"fixed_window", "5000000", "720h", ""},
		{"sliding_window", "5000000", "720h", ""},
		{"token_bucket", "1000000000", "1m", ""},
		{"sliding_window", "999999937", "8784h", ""},
		{"token_bucket", "999999937", "8784h", "1000000000"},
		{"token_bucket", "1", "1ms", "1000000000"},
		{"sliding_log", "10000", "8784h", ""},
	}
	for _, tt := range tests {
		lines := []string{"key k", "algorithm " + tt.algorithm, "events " + tt.events, "window " + tt.window}
		if tt.burst != "" {
			lines = append(lines, "burst "+tt.burst)
		}
		if _, err := parse(t, zoneBlock(lines...)); err != nil {
			t.Errorf("%s events %s window %s burst %q: got %v, want no error", tt.algorithm, tt.events, tt.window, tt.burst, err)
		}
	}
}
