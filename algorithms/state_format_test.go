package algorithms_test

import (
	"testing"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// TestStateSuffix: each algorithm's keys end with the version of the state
// format its Redis code reads and writes; the first release's formats have
// none.
func TestStateSuffix(t *testing.T) {
	tests := []struct {
		algorithm algorithms.Algorithm
		want      string
	}{
		{algorithms.FixedWindow, ":v2"},
		{algorithms.SlidingWindow, ":v3"},
		{algorithms.SlidingLog, ":v4"},
		{algorithms.TokenBucket, ":v5"},
		{algorithms.Concurrency, ""},
	}
	for _, tt := range tests {
		if got := algorithms.StateSuffix(tt.algorithm); got != tt.want {
			t.Errorf("StateSuffix(%s): got %q, want %q", tt.algorithm, got, tt.want)
		}
	}
}

// TestStateSuffixesDiffer: no two algorithms of the table share a
// versioned key, so a zone whose algorithm changes never reads state of
// another type (a new algorithm's entry is checked as it is added).
func TestStateSuffixesDiffer(t *testing.T) {
	seen := map[string]algorithms.Algorithm{}
	for _, s := range algorithms.Specs() {
		a := s.Name
		suffix := algorithms.StateSuffix(a)
		if prev, ok := seen[suffix]; ok && suffix != "" {
			t.Errorf("StateSuffix: %s and %s share %q", prev, a, suffix)
		}
		seen[suffix] = a
	}
}

// TestStateBase: a store key loses its format's suffix, whatever its
// version, and nothing else: what is no suffix stays.
func TestStateBase(t *testing.T) {
	tests := []struct{ key, want string }{
		{"sluice:api:{abc}:v5", "sluice:api:{abc}"},
		{"sluice:api:{abc}:v2", "sluice:api:{abc}"},
		{"sluice:api:{abc}:v17", "sluice:api:{abc}"},
		{"sluice:api:{abc}", "sluice:api:{abc}"}, // concurrency
		{"a:v2:v3", "a:v2"},
		{"a:v", "a:v"},
		{"a:vx", "a:vx"},
		{"a:v2x", "a:v2x"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := algorithms.StateBase(tt.key); got != tt.want {
			t.Errorf("StateBase(%q): got %q, want %q", tt.key, got, tt.want)
		}
	}
}
