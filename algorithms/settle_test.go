package algorithms_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// TestDenyCacheSkipsSettlingRequests: a denial of a request that settles
// is not cached, so a refund elsewhere lets the next identical request in.
func TestDenyCacheSkipsSettlingRequests(t *testing.T) {
	for _, settles := range []bool{false, true} {
		t.Run(fmt.Sprint("settles=", settles), func(t *testing.T) {
			ctx := context.Background()
			mem := algorithms.NewMemoryStore()
			cache := algorithms.NewDenyCache(mem)
			req := []algorithms.Request{{Key: "k", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Hour}, Cost: 1, Settles: settles}}
			first, err := cache.Allow(ctx, req)
			if err != nil || !first[0].Allowed {
				t.Fatalf("first request: got %v %v, want allowed", first, err)
			}
			if ds, _ := cache.Allow(ctx, req); ds[0].Allowed {
				t.Fatal("second request: got allowed, want denied")
			}
			if err := cache.Settle(ctx, []algorithms.Settlement{{Key: "k", Limit: req[0].Limit, At: first[0].At, Delta: -1}}); err != nil {
				t.Fatal(err)
			}
			ds, _ := cache.Allow(ctx, req)
			if got, want := ds[0].Allowed, settles; got != want {
				t.Errorf("after the refund: got allowed=%v, want %v (cached=%v)", got, want, ds[0].Cached)
			}
		})
	}
}
