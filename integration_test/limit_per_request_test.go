package integration_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestLimitPerRequestFromMap: three Caddy instances on one Redis, a plan
// header mapped through Caddy's map to a limit (free 3, pro 10) that the
// zone reads with `events {plan_limit} 2`. Concurrent pro requests for one
// key over the three instances admit exactly 10; a key that used 3 as free
// and is then pro gets 7 more, not 10; the headers show each request's own
// limit; a plan whose value is no number falls back to 2.
func TestLimitPerRequestFromMap(t *testing.T) {
	srv := redistest.Start(t)
	const (
		replicas   = 3
		concurrent = 60
	)
	for _, algorithm := range []string{"fixed_window", "sliding_window", "sliding_log", "token_bucket"} {
		t.Run(algorithm, func(t *testing.T) {
			// failure_mode closed and a long timeout: a slow decision shows
			// as a 503, never as a hidden admission; 1h windows so that
			// time passing changes no count (see TestThreeInstancesShareOneLimit)
			site := fmt.Sprintf(`	map {http.request.header.X-Plan} {plan_limit} {
		free  3
		pro   10
		bogus lots
	}
	rate_limit {
%s		failure_mode closed
		headers ietf legacy x
		zone plans_%s {
			key {http.request.header.X-Key}
			algorithm %s
			events {plan_limit} 2
			window 1h
		}
	}
	respond "ok" 200`, redisBlock(srv, "timeout 5s"), algorithm, algorithm)
			urls := make([]string, replicas)
			for i := range urls {
				urls[i] = startCaddy(t, caddyConfig{Site: site}).URL
			}
			if algorithm == "fixed_window" {
				avoidHourBoundary(t)
			}
			client := newClient(concurrent)
			zone := "plans_" + algorithm

			// exactness: concurrent pro requests for one key, spread over
			// the instances
			var wg sync.WaitGroup
			var mu sync.Mutex
			byStatus := map[int]int{}
			for w := range concurrent {
				wg.Add(1)
				go func() {
					defer wg.Done()
					status := 0
					if resp, err := doGet(client, urls[w%replicas]+"/", "X-Plan", "pro", "X-Key", "burst"); err == nil {
						status = resp.Status
					}
					mu.Lock()
					byStatus[status]++
					mu.Unlock()
				}()
			}
			wg.Wait()
			if byStatus[http.StatusOK] != 10 || byStatus[http.StatusTooManyRequests] != concurrent-10 {
				t.Errorf("%d concurrent pro requests over %d instances: statuses %v, want 10 admitted and %d rejected with 429",
					concurrent, replicas, byStatus, concurrent-10)
			}

			// upgrade mid-window: 3 as free, then 7 more as pro
			n := 0
			send := func(plan, key string) response {
				n++
				if plan == "" {
					return get(t, client, urls[n%replicas]+"/", "X-Key", key)
				}
				return get(t, client, urls[n%replicas]+"/", "X-Plan", plan, "X-Key", key)
			}
			count := func(plan, key string, k int) (admitted int) {
				for range k {
					if send(plan, key).Status == http.StatusOK {
						admitted++
					}
				}
				return admitted
			}
			wantLimit := func(what string, resp response, q int, r int) {
				t.Helper()
				policy := fmt.Sprintf(`"%s";q=%d;w=3600`, zone, q)
				if got := resp.Header.Get("RateLimit-Policy"); got != policy {
					t.Errorf("%s: RateLimit-Policy %q, want %q", what, got, policy)
				}
				if got := resp.Header.Get("RateLimit-Limit"); got != fmt.Sprint(q) {
					t.Errorf("%s: RateLimit-Limit %q, want %d", what, got, q)
				}
				if got := resp.Header.Get("X-RateLimit-Limit"); got != fmt.Sprint(q) {
					t.Errorf("%s: X-RateLimit-Limit %q, want %d", what, got, q)
				}
				if got := resp.Header.Get("RateLimit"); !strings.Contains(got, fmt.Sprintf(";r=%d;", r)) {
					t.Errorf("%s: RateLimit %q, want r=%d", what, got, r)
				}
			}
			resp := send("free", "customer")
			wantLimit("first free request", resp, 3, 2)
			if got := 1 + count("free", "customer", 4); got != 3 {
				t.Errorf("free: %d of 5 admitted, want 3", got)
			}
			resp = send("pro", "customer")
			if resp.Status != http.StatusOK {
				t.Errorf("first pro request after 3 as free: status %d, want 200", resp.Status)
			}
			wantLimit("first pro request after 3 as free", resp, 10, 6)
			if got := 1 + count("pro", "customer", 11); got != 7 {
				t.Errorf("pro after 3 as free: %d of 12 admitted, want 7 (10 less the 3 used)", got)
			}
			resp = send("free", "customer")
			if resp.Status != http.StatusTooManyRequests {
				t.Errorf("free after 10 used: status %d, want 429", resp.Status)
			}
			wantLimit("free after 10 used", resp, 3, 0)

			// a value that is no number, or no plan at all: the fallback 2
			resp = send("bogus", "fallback")
			wantLimit("plan bogus (lots)", resp, 2, 1)
			if got := 1 + count("bogus", "fallback", 1) + count("", "fallback", 2); got != 2 {
				t.Errorf("fallback: %d of 4 admitted, want 2", got)
			}
		})
	}
}
