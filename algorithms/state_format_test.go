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
		{algorithms.SlidingLog, ":v2"},
		{algorithms.TokenBucket, ""},
		{algorithms.Concurrency, ""},
	}
	for _, tt := range tests {
		if got := algorithms.StateSuffix(tt.algorithm); got != tt.want {
			t.Errorf("StateSuffix(%s): got %q, want %q", tt.algorithm, got, tt.want)
		}
	}
}
