package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestClientThatLeavesIsCounted: count_status 2xx, a slow upstream, and
// clients that give up once their request reached it. Each is logged as
// 499 and keeps its reservation (the upstream did the work), so after
// `events` of them the key has no quota left and the next request is
// refused without reaching the upstream.
func TestClientThatLeavesIsCounted(t *testing.T) {
	const events = 5
	entered := make(chan struct{}, events)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-r.Context().Done() // slower than any client here
			return
		}
		_, _ = w.Write([]byte("fast"))
	}))
	t.Cleanup(upstream.Close)
	srv := redistest.Start(t)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	log
	rate_limit {
%s		zone work {
			key static
			algorithm sliding_log
			events %d
			window 1h
			count_status 2xx
		}
	}
	reverse_proxy %s`, redisBlock(srv, "timeout 5s"), events, strings.TrimPrefix(upstream.URL, "http://"))})
	client := newClient(events)

	for i := range events {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, caddy.URL+"/slow", nil)
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
				err = fmt.Errorf("got status %d, want the request given up", resp.StatusCode)
			}
			done <- err
		}()
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d: not at the upstream after 10s", i)
		}
		cancel() // the client gives up after the upstream was reached
		if err := <-done; !strings.Contains(err.Error(), "context canceled") {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	// Caddy logs each request once its handlers returned, settlements made
	waitUntil(t, 10*time.Second, "every request given up logged as 499", func() (bool, string) {
		n := strings.Count(caddy.Log.String(), `"status":499`)
		return n == events, fmt.Sprintf("%d logged", n)
	})
	if remaining, _ := keyRemaining(t, caddy.AdminURL, "work", "static"); remaining != 0 {
		t.Errorf("remaining after %d requests whose clients left: got %d, want 0 (none refunded)", events, remaining)
	}
	if got := get(t, client, caddy.URL+"/fast").Status; got != http.StatusTooManyRequests {
		t.Errorf("next request: got status %d, want 429 (the clients that left were counted)", got)
	}
}
