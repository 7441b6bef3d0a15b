package algorithms_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestClusterBatchedExactness: on Redis Cluster a batch is split by slot
// and the calls pipelined to their nodes. 3 stores × 200 concurrent
// requests over 20 keys in many slots admit exactly each key's limit; then
// a FUNCTION FLUSH on every master is recovered from by itself.
func TestClusterBatchedExactness(t *testing.T) {
	const instances, perInstance, keys, perKey = 3, 200, 20, 7
	cluster := redistest.StartCluster(t, 3)
	stores := make([]*algorithms.RedisStore, instances)
	for i := range stores {
		stores[i] = algorithms.NewRedisStore(cluster.Client(t))
	}
	id := rand.Int64()
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: perKey, Window: time.Hour}
	reqs := func(k int) []algorithms.Request {
		return []algorithms.Request{{Key: fmt.Sprintf("cb:%d:{k%d}", id, k), Limit: limit, Cost: 1}}
	}
	admitted := admitPerKey(t, stores, instances*perInstance, keys, reqs)
	for k, got := range admitted {
		if got != perKey {
			t.Errorf("key %d admitted: got %d, want %d", k, got, perKey)
		}
	}

	ctx := context.Background()
	functions := redistest.ServerVersion(t).Functions()
	for _, s := range cluster.Servers {
		c := s.Client(t)
		err := c.ScriptFlush(ctx).Err() // no Functions (Redis 6): EVALSHA's cache
		if functions {
			err = c.FunctionFlush(ctx).Err()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	ds, err := stores[0].Allow(ctx, reqs(keys+1))
	if err != nil || !ds[0].Allowed {
		t.Errorf("after FUNCTION FLUSH (SCRIPT FLUSH) on every master: got %+v, %v, want admitted", ds, err)
	}
}
