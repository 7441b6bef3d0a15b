package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

func TestDenyCacheSparesRedis(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	cache := algorithms.NewDenyCache(New(client, Options{}))
	ctx := context.Background()
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 2, Window: time.Hour}
	key := fmt.Sprintf("flood:%d", rand.Int64())
	flood := []algorithms.Request{{Key: key, Limit: limit, Cost: 1}}

	for range 3 { // two admitted, one denied by Redis
		if _, err := cache.Allow(ctx, flood); err != nil {
			t.Fatal(err)
		}
	}
	before := redistest.ScriptCalls(t, client)
	for i := range 100 {
		ds, err := cache.Allow(ctx, flood)
		if err != nil {
			t.Fatal(err)
		}
		if ds[0].Allowed || !ds[0].Cached || ds[0].RetryAfter <= 0 {
			t.Fatalf("flood request %d: got %+v, want a cached denial", i, ds[0])
		}
	}
	if got := redistest.ScriptCalls(t, client) - before; got != 0 {
		t.Errorf("scripts run during the flood: got %d, want 0", got)
	}

	// a two-zone request denied by one zone is cached whole: the other
	// zone reports its state as of the denial
	two := []algorithms.Request{{Key: key + ":other", Limit: limit, Cost: 1}, flood[0]}
	if ds, _ := cache.Allow(ctx, two); ds[0].Cached || !ds[0].Allowed || algorithms.Admitted(two, ds) {
		t.Fatalf("first two-zone request: got %+v, want decided by Redis: other zone admits, request denied", ds)
	}
	before = redistest.ScriptCalls(t, client)
	ds, _ := cache.Allow(ctx, two)
	if !ds[0].Cached || !ds[0].Allowed || ds[0].Remaining != 2 || ds[1].Allowed || algorithms.Admitted(two, ds) {
		t.Errorf("second two-zone request: got %+v, want from the cache, the other zone at remaining 2", ds)
	}
	if got := redistest.ScriptCalls(t, client) - before; got != 0 {
		t.Errorf("scripts run for the cached two-zone request: got %d, want 0", got)
	}

	// a changed limit is not answered from the cache
	raised := []algorithms.Request{{Key: key, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 5, Window: time.Hour}, Cost: 1}}
	if ds, _ := cache.Allow(ctx, raised); !ds[0].Allowed {
		t.Errorf("raised limit: got %+v, want admitted by Redis", ds[0])
	}

	// Forget drops the denial
	before = redistest.ScriptCalls(t, client)
	cache.Forget(key)
	if _, err := cache.Allow(ctx, flood); err != nil {
		t.Fatal(err)
	}
	if got := redistest.ScriptCalls(t, client) - before; got != 1 {
		t.Errorf("scripts run after Forget: got %d, want 1", got)
	}
}

// TestDenyCacheNeverOutlastsTheQuota: a cached denial ends (the key is
// admitted again once quota returns), and a smaller cost is not denied by a
// larger one's denial.
func TestDenyCacheNeverOutlastsTheQuota(t *testing.T) {
	srv := redistest.Start(t)
	cache := algorithms.NewDenyCache(New(srv.Client(t), Options{}))
	ctx := context.Background()
	limit := algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 2, Window: 200 * time.Millisecond}
	key := fmt.Sprintf("edge:%d", rand.Int64())
	req := func(cost int64) []algorithms.Request {
		return []algorithms.Request{{Key: key, Limit: limit, Cost: cost}}
	}
	if ds, _ := cache.Allow(ctx, req(2)); !ds[0].Allowed {
		t.Fatal("first request denied")
	}
	ds, _ := cache.Allow(ctx, req(2))
	if ds[0].Allowed {
		t.Fatal("second cost-2 request admitted over the burst")
	}

	// a cost-1 request is asked of Redis, not denied by the cost-2 denial
	if ds, _ := cache.Allow(ctx, req(1)); ds[0].Cached {
		t.Error("a cost-1 request was denied from a cost-2 denial")
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		ds, err := cache.Allow(ctx, req(1))
		if err != nil {
			t.Fatal(err)
		}
		if ds[0].Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never admitted again")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
