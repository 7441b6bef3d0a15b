package algorithms_test

import (
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

func TestLimitString(t *testing.T) {
	tests := []struct {
		limit algorithms.Limit
		want  string
	}{
		{algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 100, Window: time.Minute}, "fixed_window 100 per 1m0s"},
		{algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 10, Window: time.Second, Burst: 20}, "token_bucket 10 per 1s burst 20"},
		{algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 10, Window: time.Second}, "token_bucket 10 per 1s burst 10"},
		{algorithms.Limit{Algorithm: algorithms.Concurrency, Events: 5, Window: time.Minute}, "concurrency 5 per 1m0s"},
	}
	for _, tt := range tests {
		if got := tt.limit.String(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}
