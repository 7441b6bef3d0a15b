package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// maxKeyLen bounds a Redis key, whatever the client sends.
const maxKeyLen = 100

// TestKeysAreHashedAndPrefixed checks the Redis keys Sluice writes: prefix,
// literal zone name, one hash tag, no client input, bounded length; and that
// key_prefix replaces the default prefix.
func TestKeysAreHashedAndPrefixed(t *testing.T) {
	srv := redistest.Start(t)
	algorithms := []string{"fixed_window", "sliding_window", "sliding_log", "token_bucket"}

	var zones strings.Builder
	for _, alg := range algorithms {
		// Zone names equal to the algorithm names keep the checks simple.
		fmt.Fprintf(&zones, "\t\t\tzone %s {\n\t\t\t\tkey {http.request.header.X-Tenant}\n\t\t\t\talgorithm %s\n\t\t\t\tevents 100\n\t\t\t\twindow 1m\n\t\t\t}\n", alg, alg)
	}
	site := fmt.Sprintf(`	handle /default {
		rate_limit {
%s%s		}
		respond "ok" 200
	}
	handle /prefixed {
		rate_limit {
%s			zone prefixed {
				key {http.request.header.X-Tenant}
				events 100
				window 1m
			}
		}
		respond "ok" 200
	}
	handle /empty {
		rate_limit {
%s			zone empty {
				key {http.request.header.X-Tenant}
				algorithm sliding_log
				events 2
				window 1m
			}
		}
		respond "ok" 200
	}`, exactRedis(srv), zones.String(), exactRedis(srv, "key_prefix myapp:"), exactRedis(srv))
	// Caddy's default limit on request headers is 16 KiB.
	global := "\tservers {\n\t\tmax_header_size 1MB\n\t}"
	caddy := startCaddy(t, caddyConfig{Global: global, Site: site})
	client := newClient(1)
	rdb := srv.Client(t)

	big := strings.Repeat("tenant-1", 100<<10/len("tenant-1")) // 100 KiB
	tenants := []string{
		"tenant-1",
		"tenant-2",
		big,
		"evil}{tag", // tries to inject a cluster hash tag
		"tenant-1",  // again: same bucket as the first
	}
	const distinct = 4
	for _, path := range []string{"/default", "/prefixed"} {
		for _, tenant := range tenants {
			if got := get(t, client, caddy.URL+path, "X-Tenant", tenant); got.Status != http.StatusOK {
				t.Fatalf("GET %s with X-Tenant of %d bytes: got status %d, want 200 (body %q)", path, len(tenant), got.Status, got.Body)
			}
		}
	}

	tests := []struct {
		name   string
		zone   string
		prefix string
	}{
		{"fixed_window", "fixed_window", "sluice:"},
		{"sliding_window", "sliding_window", "sluice:"},
		{"sliding_log", "sliding_log", "sluice:"},
		{"token_bucket", "token_bucket", "sluice:"},
		{"key_prefix", "prefixed", "myapp:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := tt.prefix + tt.zone + ":"
			keys := scanKeys(t, rdb, base+"*")
			if len(keys) == 0 {
				t.Fatalf("no Redis keys match %q; all keys: %q", base+"*", scanKeys(t, rdb, "*"))
			}
			tags := map[string]bool{}
			for _, key := range keys {
				checkKey(t, key, base)
				if open, end := strings.Index(key, "{"), strings.Index(key, "}"); open >= 0 && end > open {
					tags[key[open+1:end]] = true
				}
			}
			if got, want := len(tags), distinct; got != want {
				t.Errorf("got %d distinct hash tags in keys %q, want %d (one per distinct X-Tenant)", got, keys, want)
			}
		})
	}

	t.Run("empty_placeholder_shares_one_bucket", func(t *testing.T) {
		// Without the header the key expands to "": one shared bucket,
		// never a free pass.
		got := statuses(t, client, caddy.URL+"/empty", 3)
		if want := wantStatuses(2, 1, http.StatusTooManyRequests); !slices.Equal(got, want) {
			t.Errorf("3 requests without X-Tenant, events 2: got statuses %v, want %v", got, want)
		}
		if got := scanKeys(t, rdb, "sluice:empty:*"); len(got) == 0 {
			t.Errorf("no Redis key for the empty key, want one under %q", "sluice:empty:{")
		}
	})

	t.Run("key_prefix_replaces_default", func(t *testing.T) {
		if got := scanKeys(t, rdb, "sluice:prefixed:*"); len(got) > 0 {
			t.Errorf("got keys %q under the default prefix for a zone with key_prefix myapp:, want none", got)
		}
	})
}

// checkKey checks one Redis key: base (prefix and zone) then "{", exactly
// one hash tag, no client input, bounded length.
func checkKey(t *testing.T, key, base string) {
	t.Helper()
	if !strings.HasPrefix(key, base+"{") {
		t.Errorf("key %q: want prefix %q", key, base+"{")
	}
	if got := strings.Count(key, "{") + strings.Count(key, "}"); got != 2 {
		t.Errorf("key %q: got %d braces, want one {…} hash tag", key, got)
	}
	for _, raw := range []string{"tenant-1", "tenant-2", "evil"} {
		if strings.Contains(key, raw) {
			t.Errorf("key %q contains the raw client value %q", key, raw)
		}
	}
	if got := len(key); got >= maxKeyLen {
		t.Errorf("key %.120q: got length %d, want < %d", key, got, maxKeyLen)
	}
}

// scanKeys returns the keys matching pattern, sorted.
func scanKeys(t *testing.T, rdb *redis.Client, pattern string) []string {
	t.Helper()
	var keys []string
	iter := rdb.Scan(context.Background(), 0, pattern, 100).Iterator()
	for iter.Next(context.Background()) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("SCAN %q: %v", pattern, err)
	}
	slices.Sort(keys)
	return keys
}
