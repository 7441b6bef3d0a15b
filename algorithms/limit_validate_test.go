package algorithms_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

func TestLimitValidate(t *testing.T) {
	tests := []struct {
		limit   algorithms.Limit
		wantErr bool
	}{
		{algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Millisecond}, false},
		{algorithms.Limit{Algorithm: "leaky", Events: 1, Window: time.Second}, true},
		{algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 0, Window: time.Second}, true},
		{algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Microsecond}, true},
		{algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: 400 * 24 * time.Hour}, true},
		{algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Second, Burst: 3}, true},
		{algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1, Window: time.Second, Burst: 3}, false},
		{algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1_000_000, Window: 24 * time.Hour}, false},
		{algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 50_000, Window: 24 * time.Hour}, false},
		{algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1_000_000, Window: 24 * time.Hour}, false},
	}
	for _, tt := range tests {
		err := tt.limit.Validate()
		if (err != nil) != tt.wantErr {
			t.Errorf("%+v: got error %v, want error: %v", tt.limit, err, tt.wantErr)
		}
	}
}

func TestLimitBounds(t *testing.T) {
	tests := []struct {
		limit   algorithms.Limit
		wantErr bool
	}{
		{algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 100_000, Window: 24 * time.Hour}, false},
		{algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 100_000, Window: 24 * time.Hour}, false},
		{algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1_000_000_000, Window: time.Minute}, false},
		{algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1, Window: algorithms.MaxWindow, Burst: 1_000_000_000}, false},
		{algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 1_000_000_000, Window: algorithms.MaxWindow}, false},
		{algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1_000_000_000, Window: time.Millisecond}, false},
		{algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1_000_000_001, Window: time.Minute}, true},
		{algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 10, Window: time.Minute, Burst: 1_000_000_001}, true},
		{algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: 10_000, Window: time.Hour}, false},
		{algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: 10_001, Window: time.Hour}, true},
	}
	for _, tt := range tests {
		err := tt.limit.Validate()
		if (err != nil) != tt.wantErr {
			t.Errorf("%+v: got error %v, want error: %v", tt.limit, err, tt.wantErr)
		}
	}
}

// TestMaxDelayValidate: max_delay only on token_bucket, within its bounds.
func TestMaxDelayValidate(t *testing.T) {
	tests := []struct {
		limit algorithms.Limit
		ok    bool
	}{
		{algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 10, Window: time.Second, Burst: 1, MaxDelay: time.Second}, true},
		{algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 10, Window: time.Second, MaxDelay: time.Second}, false},
		{algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 10, Window: time.Second, MaxDelay: -time.Second}, false},
		{algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 10, Window: time.Second, MaxDelay: algorithms.MaxWindow + time.Second}, false},
		// 10^9 a millisecond for a day: far more waiting events than MaxEvents
		{algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1_000_000_000, Window: time.Millisecond, MaxDelay: 24 * time.Hour}, false},
		{algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1_000_000_000, Window: time.Minute, MaxDelay: time.Minute}, true},
		{algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1, Window: algorithms.MaxWindow, MaxDelay: algorithms.MaxWindow}, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d/%v/%v", tt.limit.Algorithm, tt.limit.Events, tt.limit.Window, tt.limit.MaxDelay), func(t *testing.T) {
			err := tt.limit.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate: got %v, want ok %v", err, tt.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "max_delay") {
				t.Fatalf("error %q does not name max_delay", err)
			}
		})
	}
}
