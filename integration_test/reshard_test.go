package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestClusterReshardUnderTraffic: three Caddy processes on a three-master
// Redis Cluster while redis-cli moves 2000 slots from master A to B, then
// 2000 from B to C. Keys in moving slots answer MOVED, ASK or TRYAGAIN,
// which go-redis must follow within the timeout: failure_mode closed turns
// any failure into a 503, so a single 5xx fails the test. Every key gets
// more requests than its limit; sliding_log is exact, so each key admits
// at most (and, with no failure, exactly) the limit.
func TestClusterReshardUnderTraffic(t *testing.T) {
	const (
		limit      = 20
		perKey     = 30 // requests per key, over the limit
		keysPerGen = 40 // keys in flight at once
		workers    = 4
		slots      = 2000
	)
	cluster := redistest.StartCluster(t, 3)
	ids := make([]string, len(cluster.Servers))
	for i, s := range cluster.Servers {
		id, err := s.Client(t).ClusterMyID(t.Context()).Result()
		if err != nil {
			t.Fatalf("CLUSTER MYID on %s: %v", s.Addr, err)
		}
		ids[i] = id
	}
	site := fmt.Sprintf(`	rate_limit {
		redis {
			addresses %s %s %s
			timeout 5s
		}
		failure_mode closed
		zone reshard {
			key {http.request.header.X-Key}
			algorithm sliding_log
			events %d
			window 1h
		}
	}
	respond "ok" 200`, cluster.Servers[0].Addr, cluster.Servers[1].Addr, cluster.Servers[2].Addr, limit)
	urls := make([]string, 3)
	for i := range urls {
		urls[i] = startCaddy(t, caddyConfig{Site: site}).URL
	}

	// the traffic runs until both moves are done (a busy machine can take
	// most of a minute for one), and is stopped then
	traffic := startKeyTraffic(newClient(workers), urls, keysPerGen, perKey, workers, 3*time.Minute)
	defer traffic.stop()

	admin := cluster.Servers[0].Client(t)
	before := slotsByNode(t, admin)
	moves := [][2]int{{0, 1}, {1, 2}}
	for _, m := range moves {
		from, to := m[0], m[1]
		waitClusterConsistent(t, cluster.Servers[0].Addr)
		sentBefore := traffic.sent.Load()
		start := time.Now()
		reshard(t, cluster.Servers[0].Addr, ids[from], ids[to], slots)
		during := traffic.sent.Load() - sentBefore
		t.Logf("resharding %d slots from master %d to %d took %v; %d requests were sent meanwhile",
			slots, from, to, time.Since(start).Round(time.Millisecond), during)
		if during == 0 {
			t.Errorf("no request was sent while resharding from master %d to %d; the test proves nothing", from, to)
		}
	}
	waitClusterConsistent(t, cluster.Servers[0].Addr)
	after := slotsByNode(t, admin)
	t.Logf("slots per master before %v, after %v", countsOf(before, ids), countsOf(after, ids))
	if after[ids[0]] != before[ids[0]]-slots || after[ids[2]] != before[ids[2]]+slots {
		t.Errorf("slots did not move as asked: before %v, after %v", countsOf(before, ids), countsOf(after, ids))
	}

	res := traffic.stop()
	// What the nodes saw: keys migrated under traffic, and the redirects
	// the clients were given (ASKING follows an ASK).
	stats := redirectStats(t, cluster)
	t.Logf("over all masters: %v", stats)
	if stats["cmdstat_migrate"] == 0 {
		t.Errorf("no MIGRATE ran: the moved slots held no key, so nothing was redirected")
	}
	t.Logf("traffic: %d requests over %d keys, statuses %v", res.sent, len(res.answered), res.byStatus)
	if res.bad > 0 {
		t.Errorf("%d requests got a 5xx or failed; the first: %v", res.bad, res.firstBad)
	}
	atLimit := 0
	for key, got := range res.admitted {
		if got > limit {
			t.Errorf("key %s: got %d admitted, want at most %d", key, got, limit)
		}
		if got == limit {
			atLimit++
		}
		if res.bad == 0 && res.answered[key] >= limit && got != limit {
			t.Errorf("key %s: got %d admitted of %d requests with no failure, want %d", key, got, res.answered[key], limit)
		}
	}
	if atLimit == 0 {
		t.Errorf("no key reached its limit of %d; the test has no teeth", limit)
	}
	t.Logf("%d of %d keys reached the limit", atLimit, len(res.admitted))
}

// reshard moves n slots from one node to another with redis-cli.
func reshard(t *testing.T, addr, from, to string, n int) {
	t.Helper()
	// valkey-cli 8.1 moves a slot 2-3× slower than redis-cli 7.0 (10 ms
	// against 4 ms idle; 700 of 2000 slots in 30 s under traffic on 2 busy
	// cores)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, redistest.CLI(t), "--cluster", "reshard", addr,
		"--cluster-from", from, "--cluster-to", to,
		"--cluster-slots", strconv.Itoa(n), "--cluster-yes").CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster reshard %s → %s: %v\n%s", from, to, err, tail(string(out), 3000))
	}
}

// waitClusterConsistent polls redis-cli --cluster check until every node
// agrees on the slots and none is open (importing or migrating): a reshard
// refuses to start otherwise.
func waitClusterConsistent(t *testing.T, addr string) {
	t.Helper()
	var out []byte
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		var err error
		out, err = exec.CommandContext(ctx, redistest.CLI(t), "--cluster", "check", addr).CombinedOutput()
		cancel()
		s := string(out)
		if err == nil && strings.Contains(s, "[OK] All nodes agree about slots configuration.") &&
			strings.Contains(s, "[OK] All 16384 slots covered.") && !strings.Contains(s, "[WARNING]") && !strings.Contains(s, "[ERR]") {
			return
		}
	}
	t.Fatalf("cluster not consistent after 15s:\n%s", tail(string(out), 3000))
}

// redirectStats sums, over the cluster's nodes, the calls of MIGRATE and
// ASKING and the MOVED, ASK and TRYAGAIN errors given.
func redirectStats(t *testing.T, cluster *redistest.Cluster) map[string]int {
	t.Helper()
	sums := map[string]int{}
	for _, s := range cluster.Servers {
		info := redistest.ReadInfo(t, s.Client(t), "commandstats", "errorstats")
		for _, name := range []string{"cmdstat_migrate", "cmdstat_asking"} {
			sums[name] += int(info.Stat(name, "calls"))
		}
		for _, name := range []string{"errorstat_MOVED", "errorstat_ASK", "errorstat_TRYAGAIN"} {
			sums[name] += int(info.Stat(name, "count"))
		}
	}
	return sums
}

// slotsByNode counts the slots each node ID serves, as addr's node sees it.
func slotsByNode(t *testing.T, c *redis.Client) map[string]int {
	t.Helper()
	//lint:ignore SA1019 CLUSTER SHARDS is Redis 7's; the matrix runs Redis 6.0 too
	ranges, err := c.ClusterSlots(t.Context()).Result()
	if err != nil {
		t.Fatalf("CLUSTER SLOTS: %v", err)
	}
	counts := map[string]int{}
	for _, r := range ranges {
		if len(r.Nodes) > 0 {
			counts[r.Nodes[0].ID] += r.End - r.Start + 1
		}
	}
	return counts
}

func countsOf(counts map[string]int, ids []string) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = counts[id]
	}
	return out
}

// startKeyTraffic sends perKey requests to each key of a generation of
// keys, the keys interleaved and the requests spread round-robin over urls
// by a few workers; it starts a new generation until stopped or out of
// time, and always finishes the generation it started, so every key gets
// perKey requests.
func startKeyTraffic(client *http.Client, urls []string, keys, perKey, workers int, limit time.Duration) *traffic {
	gen := keys * perKey
	return startTraffic(client, trafficPlan{
		workers: workers,
		maxTime: limit,
		batch:   gen,
		target: func(w, n int) (string, string, bool) {
			i := n*workers + w
			j := i % gen
			return urls[j%len(urls)] + "/", fmt.Sprintf("g%d-k%d", i/gen, j%keys), true
		},
	})
}
