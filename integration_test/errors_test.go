package integration_test

import (
	"fmt"
	"net/http"
	"testing"

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
	}`, redisBlock(srv), redisBlock(srv))
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
