package integration_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestRedisClientLogsInCaddysLog: go-redis's own lines (here a dial to a
// Redis that is down) are JSON lines of Caddy's log, under the logger
// rate_limit.redis, with a level, not go-redis's plain "redis: …" lines.
func TestRedisClientLogsInCaddysLog(t *testing.T) {
	down := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	site := drillHandle("/*", "redislog", "open", "\t\tredis {\n\t\t\turl redis://"+down+"/0\n\t\t}\n")
	caddy := startCaddy(t, caddyConfig{Site: site})
	client := newClient(1)
	var line map[string]any
	for deadline := time.Now().Add(10 * time.Second); line == nil; {
		if time.Now().After(deadline) {
			t.Fatal("no line of go-redis's dial failure in Caddy's log")
		}
		get(t, client, caddy.URL+"/", "X-Key", "k")
		for l := range strings.Lines(caddy.Log.String()) {
			if strings.HasPrefix(l, "redis: ") {
				t.Fatalf("a plain go-redis line in Caddy's log: %q", l)
			}
			var entry map[string]any
			if json.Unmarshal([]byte(l), &entry) == nil && entry["logger"] == "rate_limit.redis" &&
				strings.Contains(entry["msg"].(string), "failed to dial") {
				line = entry
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got, want := line["level"], "warn"; got != want {
		t.Errorf("level: got %v, want %v (%v)", got, want, line)
	}
	if got, want := line["component"], "connection pool"; got != want {
		t.Errorf("component: got %v, want %v (%v)", got, want, line)
	}
	if resp := get(t, client, caddy.URL+"/", "X-Key", "k"); resp.Status != http.StatusOK {
		t.Errorf("a request with Redis down: status %d, want 200 (failure_mode open)", resp.Status)
	}
}
