package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestTokenBucketStateFormat: a bucket whose burst × window fits in 2^52
// µs (every bucket earlier releases accepted) is still stored as
// "<units> <time>", and such a state is read as before; a larger bucket is
// stored as "<events> <fraction> <time>".
func TestTokenBucketStateFormat(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	store := New(client, Options{})
	ctx := context.Background()
	tests := []struct {
		name      string
		limit     algorithms.Limit
		preset    string // state written before the request, "" for none
		remaining int64  // after one request of cost 1
		format    *regexp.Regexp
	}{
		{"small", algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 10, Window: 10 * time.Second, Burst: 3}, "",
			2, regexp.MustCompile(`^10000000 \d+$`)},
		// 2 events of 10^7 units each, counted at t0: 1 left, then 0
		{"earlier_release_state", algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 10, Window: 10 * time.Second, Burst: 3},
			fmt.Sprintf("20000000 %d", t0.UnixMicro()), 0, regexp.MustCompile(`^30000000 \d+$`)},
		// half a token (5·10^6 units) counted at t0: 2 whole ones left, then 1
		{"earlier_release_fraction", algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 10, Window: 10 * time.Second, Burst: 3},
			fmt.Sprintf("5000000 %d", t0.UnixMicro()), 1, regexp.MustCompile(`^15000000 \d+$`)},
		{"large", algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1_000_000_000, Window: time.Minute}, "",
			999_999_999, regexp.MustCompile(`^1 0 \d+$`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := fmt.Sprintf("format:%d", rand.Int64())
			if tt.preset != "" {
				if err := client.Set(ctx, key, tt.preset, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
			}
			ds, err := store.AllowAt(ctx, t0, []algorithms.Request{{Key: key, Limit: tt.limit, Cost: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if got := ds[0].Remaining; !ds[0].Allowed || got != tt.remaining {
				t.Errorf("got allowed=%v remaining=%d, want true, %d", ds[0].Allowed, got, tt.remaining)
			}
			v, err := client.Get(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if !tt.format.MatchString(v) {
				t.Errorf("stored state: got %q, want it to match %s", v, tt.format)
			}
		})
	}
}
