package sluice

import "testing"

func TestCLIFormatSeconds(t *testing.T) {
	tests := []struct {
		sec  float64
		want string
	}{
		{0, "0s"}, {-3, "0s"}, {0.25, "250ms"}, {1.5, "1.5s"}, {18, "18s"}, {60, "1m"}, {90, "1m30s"},
		{3600, "1h"}, {5400, "1h30m"}, {3661, "1h1m1s"}, {86400, "1d"}, {30 * 86400, "30d"}, {90000, "25h"},
	}
	for _, tt := range tests {
		if got := formatSeconds(tt.sec); got != tt.want {
			t.Errorf("formatSeconds(%v) = %q, want %q", tt.sec, got, tt.want)
		}
	}
}

func TestCLIPrintableKey(t *testing.T) {
	tests := []struct{ key, want string }{
		{"10.0.0.1", "10.0.0.1"}, {"tenant/1:GET /v1", "tenant/1:GET /v1"}, {"", `""`},
		{" padded ", `" padded "`}, {"bell\a", `"bell\a"`}, {"ünïcode", "ünïcode"},
	}
	for _, tt := range tests {
		if got := printableKey(tt.key); got != tt.want {
			t.Errorf("printableKey(%q) = %s, want %s", tt.key, got, tt.want)
		}
	}
}

// TestCLIShellWord: the "more:" line of `overrides` can be pasted as is.
func TestCLIShellWord(t *testing.T) {
	tests := []struct{ s, want string }{
		{"api", "api"}, {"3q2+7w/Ab=", "3q2+7w/Ab="}, {"my zone", "'my zone'"}, {"", "''"},
		{"it's", `'it'\''s'`}, {"a;rm", "'a;rm'"}, {"ü", "'ü'"}, {"$HOME", "'$HOME'"},
	}
	for _, tt := range tests {
		if got := shellWord(tt.s); got != tt.want {
			t.Errorf("shellWord(%q) = %s, want %s", tt.s, got, tt.want)
		}
	}
}
