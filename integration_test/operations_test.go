package integration_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

func adminDo(t *testing.T, method, u, contentType string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAdminAPI reads and resets keys through the admin API, on Redis and
// on the embedded store, and lists the zones in force.
func TestAdminAPI(t *testing.T) {
	srv := redistest.Start(t)
	for name, store := range map[string]string{"redis": exactRedis(srv), "memory": ""} {
		t.Run(name, func(t *testing.T) {
			caddy := startCaddy(t, caddyConfig{Site: `	rate_limit {
` + store + `		zone api_` + name + ` {
			key {http.request.header.X-Key}
			algorithm fixed_window
			events 3
			window 1h
		}
	}
	respond "ok" 200`})
			client := newClient(1)
			zone := "api_" + name
			keyURL := caddy.AdminURL + "/rate_limit/zones/" + zone + "/keys/" + url.PathEscape("tenant/1")

			// a key never seen has its full quota
			status, body := adminDo(t, http.MethodGet, keyURL, "", nil)
			var state struct {
				Zone      string `json:"zone"`
				Limit     int64  `json:"limit"`
				Remaining int64  `json:"remaining"`
				Reset     int64  `json:"reset_seconds"`
			}
			if err := json.Unmarshal([]byte(body), &state); status != 200 || err != nil || state.Remaining != 3 || state.Limit != 3 || state.Zone != zone {
				t.Fatalf("fresh key: got %d %s, want 200 with remaining 3", status, body)
			}
			for range 3 {
				get(t, client, caddy.URL+"/", "X-Key", "tenant/1")
			}
			if got := get(t, client, caddy.URL+"/", "X-Key", "tenant/1").Status; got != 429 {
				t.Fatalf("4th request: got %d, want 429", got)
			}
			// peeking consumes nothing: twice the same answer
			for range 2 {
				status, body = adminDo(t, http.MethodGet, keyURL, "", nil)
				if err := json.Unmarshal([]byte(body), &state); status != 200 || err != nil || state.Remaining != 0 || state.Reset < 1 {
					t.Fatalf("exhausted key: got %d %s, want remaining 0 and a reset", status, body)
				}
			}
			if status, body = adminDo(t, http.MethodDelete, keyURL, "", nil); status != http.StatusNoContent {
				t.Fatalf("DELETE: got %d %s, want 204", status, body)
			}
			if got := get(t, client, caddy.URL+"/", "X-Key", "tenant/1").Status; got != 200 {
				t.Errorf("after DELETE: got %d, want 200 (the key starts over, deny cache included)", got)
			}

			status, body = adminDo(t, http.MethodGet, caddy.AdminURL+"/rate_limit/zones", "", nil)
			var zones []map[string]any
			if err := json.Unmarshal([]byte(body), &zones); status != 200 || err != nil || len(zones) != 1 {
				t.Fatalf("zones: got %d %s", status, body)
			}
			z := zones[0]
			if z["name"] != zone || z["algorithm"] != "fixed_window" || z["events"] != 3.0 || z["window"] != 3600.0 ||
				z["backend"] != name || z["healthy"] != true {
				t.Errorf("zones: got %v", z)
			}
			if status, _ = adminDo(t, http.MethodGet, caddy.AdminURL+"/rate_limit/zones/nope/keys/x", "", nil); status != 404 {
				t.Errorf("unknown zone: got %d, want 404", status)
			}
		})
	}
}

// TestMetrics: decisions, denials and cache hits reach the admin /metrics.
func TestMetrics(t *testing.T) {
	srv := redistest.Start(t)
	caddy := startCaddy(t, caddyConfig{Global: "\tmetrics", Site: `	rate_limit {
` + exactRedis(srv) + `		zone metered {
			key static
			algorithm fixed_window
			events 2
			window 1h
		}
	}
	respond "ok" 200`})
	client := newClient(1)
	for range 5 {
		get(t, client, caddy.URL+"/")
	}
	_, body := adminDo(t, http.MethodGet, caddy.AdminURL+"/metrics", "", nil)
	for _, want := range []string{
		`caddy_rate_limit_decisions_total{outcome="allowed",zone="metered"} 2`,
		`caddy_rate_limit_decisions_total{outcome="denied",zone="metered"} 3`,
		`caddy_rate_limit_deny_cache_hits_total{zone="metered"} 2`,
		`caddy_rate_limit_near_limit_total{zone="metered"} 1`,
		`caddy_rate_limit_circuit_open{redis="` + srv.Addr + `"} 0`,
		`caddy_rate_limit_backend_duration_seconds_count{redis="` + srv.Addr + `"} 3`,
		`caddy_rate_limit_backend_errors_total{cause="circuit_open",redis="` + srv.Addr + `"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, `key=`) {
		t.Error("/metrics has a per-key label")
	}
	if t.Failed() {
		t.Log(body)
	}
}

// TestLoadJSON: a JSON config posted to the admin API's /load limits.
func TestLoadJSON(t *testing.T) {
	caddy := startCaddy(t, caddyConfig{Site: `	respond "before" 200`})
	port := strings.TrimPrefix(caddy.URL, "http://127.0.0.1:")
	admin := strings.TrimPrefix(caddy.AdminURL, "http://")
	config := `{
	"admin": {"listen": "` + admin + `"},
	"apps": {"http": {"servers": {"s": {
		"listen": ["127.0.0.1:` + port + `"],
		"automatic_https": {"disable": true},
		"routes": [{"handle": [
			{"handler": "rate_limit", "rate_limits": {"loaded": {"key": "static", "max_events": 2, "window": "1h", "algorithm": "sliding_log"}}},
			{"handler": "static_response", "body": "after"}
		]}]
	}}}}
}`
	if status, body := adminDo(t, http.MethodPost, caddy.AdminURL+"/load", "application/json", []byte(config)); status != 200 {
		t.Fatalf("POST /load: got %d %s", status, body)
	}
	client := newClient(1)
	got := statuses(t, client, caddy.URL+"/", 3)
	if want := []int{200, 200, 429}; !slices.Equal(got, want) {
		t.Errorf("after POST /load: got %v, want %v", got, want)
	}
}
