package integration_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestNoRedisBlockUsesMemory checks that without a redis block each
// instance limits on its own, in memory, and warns about it at start.
func TestNoRedisBlockUsesMemory(t *testing.T) {
	const events = 3
	site := `	rate_limit {
		zone local {
			key static
			algorithm sliding_log
			events 3
			window 1m
		}
	}
	respond "ok" 200`
	first := startCaddy(t, caddyConfig{Site: site})
	second := startCaddy(t, caddyConfig{Site: site})
	client := newClient(1)
	want := wantStatuses(events, 1, http.StatusTooManyRequests)

	// The second instance has its own counters: the first one's requests
	// leave its quota whole.
	for i, caddy := range []*caddyProc{first, second} {
		if got := statuses(t, client, caddy.URL+"/", events+1); !slices.Equal(got, want) {
			t.Errorf("instance %d: got statuses %v, want %v", i+1, got, want)
		}
	}

	t.Run("warns_at_start", func(t *testing.T) {
		if !hasWarning(first.Log.String(), "memory") {
			t.Errorf("no warn-level log entry mentioning %q, want one at start (the in-memory store is per instance)", "memory")
		}
	})
}

// hasWarning reports whether Caddy's JSON log holds a warn-level entry
// that mentions word (in any field, case-insensitively).
func hasWarning(log, word string) bool {
	for _, line := range strings.Split(log, "\n") {
		var entry map[string]any
		if json.Unmarshal([]byte(line), &entry) != nil {
			continue
		}
		if entry["level"] == "warn" && strings.Contains(strings.ToLower(line), word) {
			return true
		}
	}
	return false
}
