package sluice

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// TestHasErrorRoutes: a rejection goes to handle_errors only when the
// request's site has error routes: those of a server whose routes match
// the request (the Caddyfile puts each site's behind its host matcher).
func TestHasErrorRoutes(t *testing.T) {
	siteRoute := caddyhttp.Route{MatcherSets: caddyhttp.MatcherSets{{caddyhttp.MatchHost{"errors.test"}}}}
	tests := []struct {
		name   string
		server *caddyhttp.Server
		host   string
		want   bool
	}{
		{"no server", nil, "a.test", false},
		{"no error routes", &caddyhttp.Server{}, "a.test", false},
		{"another site's error routes", &caddyhttp.Server{Errors: &caddyhttp.HTTPErrorConfig{Routes: caddyhttp.RouteList{siteRoute}}}, "a.test", false},
		{"this site's error routes", &caddyhttp.Server{Errors: &caddyhttp.HTTPErrorConfig{Routes: caddyhttp.RouteList{siteRoute}}}, "errors.test", true},
		{"a route for every site", &caddyhttp.Server{Errors: &caddyhttp.HTTPErrorConfig{Routes: caddyhttp.RouteList{{}}}}, "a.test", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := caddyhttp.PrepareRequest(httptest.NewRequest(http.MethodGet, "http://"+tt.host+"/", nil),
				caddy.NewReplacer(), httptest.NewRecorder(), tt.server)
			if got := hasErrorRoutes(r); got != tt.want {
				t.Errorf("hasErrorRoutes: got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestServeHTTPRejection(t *testing.T) {
	tests := []struct {
		name   string
		status string // status line; "" for the default
		want   int
	}{
		{"default status", "", http.StatusTooManyRequests},
		{"configured status", "status 503", http.StatusServiceUnavailable},
		{"configured 4xx", "status 420", 420},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			zone := uniqueZone("rej")
			h := newHandler(t, rateLimit(tt.status, logZone(zone, 2, "1m")))
			rec := new(eventRecorder)
			if err := h.events.On("rate_limit_exceeded", rec); err != nil {
				t.Fatalf("subscribing to rate_limit_exceeded: %v", err)
			}
			for i := range 2 {
				if res := serve(t, h, reqOpts{}); !res.allowed() {
					t.Fatalf("request %d: err %v; want allowed", i, res.err)
				}
			}
			res := serve(t, h, reqOpts{})
			wantDenied(t, res, tt.want)
			// Retry-After ≤ window + window/events = 90s.
			if got := retryAfter(t, res); got > 90 {
				t.Errorf("Retry-After = %d, want ≤ 90", got)
			}
			if got := res.repl.ReplaceAll("{http.rate_limit.exceeded.name}", ""); got != zone {
				t.Errorf("{http.rate_limit.exceeded.name} = %q, want %q", got, zone)
			}
			if res.rec.Body.Len() != 0 || res.rec.Code != http.StatusOK {
				t.Errorf("handler wrote a response (%d, %q); want it left to error handling", res.rec.Code, res.rec.Body.String())
			}
			events := rec.forZone(zone)
			if len(events) != 1 {
				t.Fatalf("rate_limit_exceeded events for %s: %d, want 1", zone, len(events))
			}
			if _, ok := events[0]["key"]; ok {
				t.Errorf("event carries the key without log_key: %v", events[0])
			}
			if ra, ok := events[0]["retry_after"].(float64); !ok || ra < 1 {
				t.Errorf("event retry_after = %v, want seconds ≥ 1", events[0]["retry_after"])
			}
		})
	}
}
