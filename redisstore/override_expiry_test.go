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

// TestOverrideLongestExpiry: an override with the longest expiry the
// admin API takes (366 days, as the longest ban) is kept and applied: its
// end and its key's expiry do not overflow.
func TestOverrideLongestExpiry(t *testing.T) {
	srv := redistest.Start(t)
	store := New(srv.Client(t), Options{})
	ctx := context.Background()
	key := fmt.Sprintf("ovx:{%d}", rand.Int64())
	if err := store.SetOverride(ctx, key, algorithms.Override{Events: 7}, algorithms.MaxBan); err != nil {
		t.Fatal(err)
	}
	req := []algorithms.Request{{Key: key, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 2, Window: time.Minute}, Cost: 1, Overrides: true}}
	ds, err := store.Peek(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ds[0].Override, (algorithms.Override{Events: 7, Burst: 7}); got != want {
		t.Errorf("override after SetOverride for %v: got %+v, want %+v", algorithms.MaxBan, got, want)
	}
}
