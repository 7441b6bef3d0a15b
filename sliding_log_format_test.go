package sluice

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
	"github.com/sluicehq/caddy-sluice/redisstore"
)

// TestSlidingLogPreviousFormatNotMisread: the first release's sliding_log
// state (one member "<time>:<seq>" per unit, at prefix{tag}) changes
// nothing for this release, which keeps its entries at prefix{tag}:v4 and
// never writes the previous key: a full previous log still admits as a
// fresh key does, and is left as it was.
func TestSlidingLogPreviousFormatNotMisread(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	store := redisstore.New(client, redisstore.Options{})
	ctx := context.Background()
	now := time.UnixMicro(1_764_580_000_123_456)
	limit := algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: 5, Window: time.Minute}
	z := &Zone{keyPrefix: "upgrade:log:", limit: limit}
	key := z.storeKey("client-1")
	previousKey, ok := strings.CutSuffix(key, ":v4")
	if !ok {
		t.Fatalf("store key %q: want the suffix :v4", key)
	}
	var previous []redis.Z // a full log, as the first release wrote it
	for i := range 5 {
		stamp := now.UnixMicro() - 1000
		previous = append(previous, redis.Z{Score: float64(stamp), Member: fmt.Sprintf("%d:%08d", stamp, i+1)})
	}
	if err := client.ZAdd(ctx, previousKey, previous...).Err(); err != nil {
		t.Fatal(err)
	}
	reqs := []algorithms.Request{{Key: key, Limit: limit, Cost: 2}}
	fresh := algorithms.NewMemoryStore()
	for i := range 3 {
		want := fresh.AllowAt(now, reqs)
		got, err := store.AllowAt(ctx, now, reqs)
		if err != nil {
			t.Fatal(err)
		}
		if got[0] != want[0] {
			t.Errorf("request %d: got %+v, want %+v (as if no state)", i+1, got[0], want[0])
		}
	}
	if got, err := client.ZRangeWithScores(ctx, previousKey, 0, -1).Result(); err != nil || fmt.Sprint(got) != fmt.Sprint(previous) {
		t.Errorf("previous release's state: got %v (%v), want %v untouched", got, err, previous)
	}
}
