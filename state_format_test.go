package sluice

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
	"github.com/sluicehq/caddy-sluice/redisstore"
)

// TestStoreKeyStateSuffix: a store key ends with its algorithm's state
// format version after the hash tag, the tag (and so pk and the Cluster
// slot) is what it was, and an algorithm whose format changed gets a key
// the previous release never used.
func TestStoreKeyStateSuffix(t *testing.T) {
	tests := []struct {
		algorithm algorithms.Algorithm
		suffix    string
	}{
		{algorithms.FixedWindow, ":v2"},
		{algorithms.SlidingWindow, ":v3"},
		{algorithms.TokenBucket, ":v5"},
		{algorithms.SlidingLog, ":v4"},
		{algorithms.Concurrency, ""},
	}
	for _, tt := range tests {
		t.Run(string(tt.algorithm), func(t *testing.T) {
			z := &Zone{keyPrefix: "sluice:z:", limit: algorithms.Limit{Algorithm: tt.algorithm}}
			key := z.storeKey("tenant-1")
			if got := algorithms.StateSuffix(tt.algorithm); got != tt.suffix {
				t.Errorf("StateSuffix: got %q, want %q", got, tt.suffix)
			}
			previous, ok := strings.CutSuffix(key, tt.suffix)
			if !ok || !strings.HasSuffix(previous, "}") {
				t.Fatalf("store key %q: want prefix{tag}%s", key, tt.suffix)
			}
			if got, want := keyHash(key), keyHash(previous); got != want || got == "" {
				t.Errorf("keyHash: got %q, want %q (the previous release's)", got, want)
			}
		})
	}
}

// TestPreviousFormatNotMisread: an earlier release's state, in its exact
// format at its key (text at prefix{tag}; sliding_window's weighted
// counter as packed doubles at prefix{tag}:v2), changes nothing for this
// release, which keeps its own state at prefix{tag}:v2 (fixed_window),
// prefix{tag}:v3 (sliding_window's slots) or prefix{tag}:v5
// (token_bucket's packed level); the earlier release's
// state is left as it wrote it, and this release never writes its key.
// Even at this release's key, the text is not taken for a count. Each
// decision must equal a fresh one (the memory store's, with no state).
func TestPreviousFormatNotMisread(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	store := redisstore.New(client, redisstore.Options{})
	ctx := context.Background()
	now := time.UnixMicro(1_764_580_000_123_456)
	window := time.Minute
	start := now.UnixMicro() - now.UnixMicro()%window.Microseconds()
	tests := []struct {
		name      string
		algorithm algorithms.Algorithm
		previous  string // the previous release's state: a full window
		atNewKey  bool   // written at this release's key instead
		suffix    string // the suffix of the release that wrote it
	}{
		{"fixed_window", algorithms.FixedWindow, fmt.Sprintf("%d %d", start, 5), false, ""},
		{"sliding_window", algorithms.SlidingWindow, fmt.Sprintf("%d %d %d", start, 5, 5), false, ""},
		{"fixed_window_at_new_key", algorithms.FixedWindow, fmt.Sprintf("%d %d", start, 5), true, ""},
		{"sliding_window_at_new_key", algorithms.SlidingWindow, fmt.Sprintf("%d %d %d", start, 5, 5), true, ""},
		// the weighted two-window counter of ":v2": start, cur, prev as
		// '<ddd' (24 bytes, the length of a one-slot ":v3" state)
		{"sliding_window_v2", algorithms.SlidingWindow, redistest.PackedDoubles(start, 5, 5), false, ":v2"},
		{"sliding_window_v2_at_new_key", algorithms.SlidingWindow, redistest.PackedDoubles(start, 5, 5), true, ":v2"},
		{"sliding_window_v2_next_window", algorithms.SlidingWindow, redistest.PackedDoubles(start+window.Microseconds(), 5, 5), true, ":v2"},
		// token_bucket's text: a full bucket of 5 events ("<units> <time>",
		// and the "<events> <fraction> <time>" of big buckets)
		{"token_bucket", algorithms.TokenBucket, fmt.Sprintf("%d %d", 5*window.Microseconds(), now.UnixMicro()), false, ""},
		{"token_bucket_three_numbers", algorithms.TokenBucket, fmt.Sprintf("%d %d %d", 5, 0, now.UnixMicro()), false, ""},
		{"token_bucket_at_new_key", algorithms.TokenBucket, fmt.Sprintf("%d %d", 5*window.Microseconds(), now.UnixMicro()), true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			limit := algorithms.Limit{Algorithm: tt.algorithm, Events: 5, Window: window}
			z := &Zone{keyPrefix: "upgrade:" + tt.name + ":", limit: limit}
			key := z.storeKey("client-1")
			previousKey := strings.TrimSuffix(key, algorithms.StateSuffix(tt.algorithm)) + tt.suffix
			written := previousKey
			if tt.atNewKey {
				written = key
			}
			if err := client.Set(ctx, written, tt.previous, time.Hour).Err(); err != nil {
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
			if tt.atNewKey {
				return
			}
			if got, err := client.Get(ctx, previousKey).Result(); err != nil || got != tt.previous {
				t.Errorf("previous release's state: got %q (%v), want %q untouched", got, err, tt.previous)
			}
		})
	}
	for _, a := range []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindow, algorithms.TokenBucket} {
		t.Run("new_state_not_at_previous_key/"+string(a), func(t *testing.T) {
			limit := algorithms.Limit{Algorithm: a, Events: 5, Window: window}
			z := &Zone{keyPrefix: "upgrade:fresh:", limit: limit}
			key := z.storeKey("client-1")
			if _, err := store.AllowAt(ctx, now, []algorithms.Request{{Key: key, Limit: limit, Cost: 1}}); err != nil {
				t.Fatal(err)
			}
			bare := strings.TrimSuffix(key, algorithms.StateSuffix(a))
			for _, k := range []string{key, bare, bare + ":v2"} {
				n, err := client.Exists(ctx, k).Result()
				if err != nil {
					t.Fatal(err)
				}
				if got, want := n == 1, k == key; got != want {
					t.Errorf("key %q written: got %v, want %v (this release's only)", k, got, want)
				}
			}
		})
	}
}
