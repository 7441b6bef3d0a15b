package integration_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestHandleErrors checks that rejections go through Caddy's error routes,
// so handle_errors shapes the body, and that `status` changes the code.
func TestHandleErrors(t *testing.T) {
	srv := redistest.Start(t)
	site := fmt.Sprintf(`	handle /default {
		rate_limit {
%s			zone errdefault {
				key static
				events 1
				window 1m
			}
		}
		respond "ok" 200
	}
	handle /status503 {
		rate_limit {
%s			status 503
			zone err503 {
				key static
				events 1
				window 1m
			}
		}
		respond "ok" 200
	}
	handle_errors {
		respond "slow down {err.status_code}"
	}`, exactRedis(srv), exactRedis(srv))
	caddy := startCaddy(t, caddyConfig{Site: site})
	client := newClient(1)

	tests := []struct {
		path       string
		wantStatus int
		wantBody   string
	}{
		{"/default", http.StatusTooManyRequests, "slow down 429"},
		{"/status503", http.StatusServiceUnavailable, "slow down 503"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			if got := get(t, client, caddy.URL+tt.path); got.Status != http.StatusOK || got.Body != "ok" {
				t.Fatalf("first request: got %d %q, want 200 \"ok\"", got.Status, got.Body)
			}
			got := get(t, client, caddy.URL+tt.path)
			if got.Status != tt.wantStatus || got.Body != tt.wantBody {
				t.Errorf("second request: got %d %q, want %d %q", got.Status, got.Body, tt.wantStatus, tt.wantBody)
			}
			if got.Header.Get("Retry-After") == "" {
				t.Errorf("second request (a rejection): no Retry-After field, want one (headers %v)", got.Header)
			}
		})
	}
}

// TestRateLimitInsideHandleErrors: a rate_limit inside handle_errors
// answers its rejection itself, with its status and Retry-After, rather
// than running the error routes again (which would reject again, without
// end: the client never got an answer). Each request is bounded by the
// client's timeout.
func TestRateLimitInsideHandleErrors(t *testing.T) {
	site := `	error /missing* 404
	handle_errors {
		rate_limit {
			zone scanners {
				key {remote_host}
				events 2
				window 1m
			}
		}
		respond "not here {err.status_code}"
	}`
	caddy := startCaddy(t, caddyConfig{Site: site})
	client := newClient(1)
	client.Timeout = 3 * time.Second
	wants := []struct {
		status int
		body   string
	}{
		{http.StatusNotFound, "not here 404"},
		{http.StatusNotFound, "not here 404"},
		{http.StatusTooManyRequests, ""},
		{http.StatusTooManyRequests, ""},
	}
	for i, want := range wants {
		got, err := doGet(client, caddy.URL+"/missing"+strconv.Itoa(i))
		if err != nil {
			t.Fatalf("request %d: %v (want %d)", i+1, err, want.status)
		}
		if got.Status != want.status || got.Body != want.body {
			t.Errorf("request %d: got %d %q, want %d %q", i+1, got.Status, got.Body, want.status, want.body)
		}
		if rejected := want.status == http.StatusTooManyRequests; rejected && got.Header.Get("Retry-After") == "" {
			t.Errorf("request %d (a rejection): no Retry-After field, want one (headers %v)", i+1, got.Header)
		}
	}
	if log := caddy.Log.String(); strings.Contains(log, "error handling handler error") {
		t.Errorf("caddy logged a failing error route:\n%s", log)
	}
}
