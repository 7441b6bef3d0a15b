package integration_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// pairedSite is a site whose zone "paired" allows events per hour. With a
// brokenPath, a second rate_limit under /broken declares brokenZone and a
// jwt public_key file at brokenPath that does not exist, so its Provision
// fails after its zones were set up.
func pairedSite(srv *redistest.Server, events int, brokenPath string, brokenZone string) string {
	site := fmt.Sprintf(`	handle /broken* {
		rate_limit {
%s			jwt {
				public_key %s
			}
			zone %s {
				key {http.request.header.X-Key}
				algorithm fixed_window
				events 9
				window 1h
			}
		}
		respond "broken" 200
	}
`, exactRedis(srv), brokenPath, brokenZone)
	if brokenPath == "" {
		site = ""
	}
	return fmt.Sprintf(`	handle {
		rate_limit {
%s			zone paired {
				key {http.request.header.X-Key}
				algorithm fixed_window
				events %d
				window 1h
			}
		}
		respond "ok" 200
	}
`, exactRedis(srv), events) + site
}

// TestFailedLoadKeepsZones: a POST /load that fails leaves the running
// config's zones in the admin API, with the running config's limits: the
// failed config withdraws only what it registered. First the failing
// handler declares the running zone itself; then a handler that
// provisioned (with another limit) is abandoned because a later one fails.
func TestFailedLoadKeepsZones(t *testing.T) {
	srv := redistest.Start(t)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	tests := []struct {
		name string
		site string // the config that fails to load
	}{
		{"the failing handler declares the running zone", pairedSite(srv, 5, missing, "paired")},
		{"a provisioned handler is abandoned", pairedSite(srv, 7, missing, "broken")},
	}
	caddy := startCaddy(t, caddyConfig{Site: pairedSite(srv, 5, "", "")})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if status, body := adminDo(t, http.MethodPost, caddy.AdminURL+"/load", "text/caddyfile",
				[]byte(reloadCaddyfile(t, caddy, caddyConfig{Site: tt.site}))); status == http.StatusOK {
				t.Fatalf("POST /load of a config with a missing public_key: got %d %s, want a failure", status, body)
			}
			status, body := adminDo(t, http.MethodGet, caddy.AdminURL+"/rate_limit/zones", "", nil)
			var zones []struct {
				Name   string `json:"name"`
				Events int64  `json:"events"`
			}
			if err := json.Unmarshal([]byte(body), &zones); status != http.StatusOK || err != nil {
				t.Fatalf("GET /rate_limit/zones: got %d %s (%v), want 200", status, body, err)
			}
			if len(zones) != 1 || zones[0].Name != "paired" || zones[0].Events != 5 {
				t.Errorf("zones after the failed load: got %+v, want only paired with events 5", zones)
			}
			status, body = adminDo(t, http.MethodGet, caddy.AdminURL+"/rate_limit/zones/paired/keys/k", "", nil)
			if status != http.StatusOK || !strings.Contains(body, `"limit":5`) {
				t.Errorf("GET key of paired: got %d %s, want 200 with limit 5", status, body)
			}
			const series = `caddy_rate_limit_decisions_total{outcome="allowed",zone="paired"}`
			before := metricValue(t, caddy, series)
			if got := get(t, newClient(1), caddy.URL+"/", "X-Key", tt.name).Status; got != http.StatusOK {
				t.Errorf("request after the failed load: got status %d, want 200", got)
			}
			// the admin /metrics endpoint now serves the failed config's
			// registry (Caddy swaps it first): the running zone counts there
			if after := metricValue(t, caddy, series); after != before+1 {
				t.Errorf("%s after one more request: got %v, want %v", series, after, before+1)
			}
			if got := metricValue(t, caddy, `caddy_rate_limit_backend_errors_total{cause="timeout",redis="`+srv.Addr+`"}`); got != 0 {
				t.Errorf("backend_errors_total before any failure: got %v, want 0 (shown from the start)", got)
			}
		})
	}
}
