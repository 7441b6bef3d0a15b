package integration_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestClusterThreeInstances: three Caddy processes on a three-master Redis
// Cluster; 20 keys × 30 concurrent requests admit exactly the limit per key,
// with a second zone on another slot (so refunds run), and the keys spread
// over every master.
func TestClusterThreeInstances(t *testing.T) {
	const (
		keys    = 20
		perKey  = 30
		limit   = 10
		masters = 3
	)
	cluster := redistest.StartCluster(t, masters)
	site := fmt.Sprintf(`	rate_limit {
		# under this load a decision can take longer than the default
		# 100ms; closed makes a timeout a 503 that fails the test, never
		# an admission that hides in the count
		redis {
			addresses %s %s %s
			timeout 5s
		}
		failure_mode closed
		zone per_key {
			key {http.request.header.X-Key}
			algorithm sliding_log
			events %d
			window 1h
		}
		zone everyone {
			key all
			algorithm token_bucket
			events 100000
			window 1h
		}
	}
	respond "ok" 200`, cluster.Servers[0].Addr, cluster.Servers[1].Addr, cluster.Servers[2].Addr, limit)
	urls := make([]string, 3)
	for i := range urls {
		urls[i] = startCaddy(t, caddyConfig{Site: site}).URL
	}

	res := startTraffic(newClient(keys*perKey), trafficPlan{
		workers: keys * perKey,
		target:  onePerWorker(urls, func(w int) string { return fmt.Sprintf("client-%d", w%keys) }),
	}).wait()
	if res.bad > 0 {
		t.Errorf("%d requests got a 5xx or failed; the first: %v", res.bad, res.firstBad)
	}
	for key := range keys {
		if got := res.admitted[fmt.Sprintf("client-%d", key)]; got != limit {
			t.Errorf("key client-%d: got %d admitted, want %d", key, got, limit)
		}
	}

	for _, s := range cluster.Servers {
		n, err := s.Client(t).DBSize(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Errorf("master %s holds no keys; hashed keys should spread over every master", s.Addr)
		}
	}
}
