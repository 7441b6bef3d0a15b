package integration_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// reloadSite is version v of the site: the response body names the version
// and the zone "varying" changes its limit with it; zone "held" never
// changes. With changeRedis, every reload also changes the Redis settings
// (pool_size 8 in odd versions, the default in even ones), which takes a
// new shared client and releases the old one. failure_mode closed makes any Redis
// trouble visible as a 503. The timeout is generous: a reload makes Caddy
// busy for a moment, and a timeout is not what this drill looks for.
func reloadSite(srv *redistest.Server, v int, changeRedis bool) string {
	redisLines := []string{"timeout 5s"}
	if changeRedis && v%2 == 1 {
		redisLines = append(redisLines, "pool_size 8")
	}
	redis := redisBlock(srv, redisLines...)
	return fmt.Sprintf(`	handle /varying {
		rate_limit {
%s			failure_mode closed
			zone varying {
				key {http.request.header.X-Key}
				algorithm sliding_log
				events %d
				window 1h
			}
		}
		respond "v%d" 200
	}
	handle {
		rate_limit {
%s			failure_mode closed
			zone held {
				key {http.request.header.X-Key}
				algorithm sliding_log
				events %d
				window 1h
			}
		}
		respond "v%d" 200
	}
`, redis, 100+v, v, redis, drillEvents, v)
}

// reloadCaddyfile is the whole Caddyfile startCaddy would write for cfg,
// on the ports caddy already listens on: the admin address must stay, or
// the reload would move the admin API away.
func reloadCaddyfile(t *testing.T, caddy *caddyProc, cfg caddyConfig) string {
	t.Helper()
	site, err := url.Parse(caddy.URL)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := url.Parse(caddy.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	global := ""
	if cfg.Global != "" {
		global = cfg.Global + "\n"
	}
	return fmt.Sprintf("{\n\tadmin 127.0.0.1:%s\n\tauto_https off\n%s}\n\nhttp://127.0.0.1:%s {\n%s\n}\n",
		admin.Port(), global, site.Port(), cfg.Site)
}

// loadCaddyfile posts a Caddyfile to the admin API's /load.
func loadCaddyfile(t *testing.T, caddy *caddyProc, caddyfile string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, caddy.AdminURL+"/load", strings.NewReader(caddyfile))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "text/caddyfile")
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST /load: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /load: got status %d (%s), want 200", resp.StatusCode, body)
	}
}

// redisClients counts the clients connected to Redis, except the ones
// named observer (the test's own).
func redisClients(t *testing.T, rdb *redis.Client, observer string) int {
	t.Helper()
	list, err := rdb.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	n := 0
	for line := range strings.Lines(list) {
		if strings.TrimSpace(line) != "" && !strings.Contains(line, " name="+observer+" ") {
			n++
		}
	}
	return n
}

// settledClients polls, for up to limit, until the client count is at most
// want, and returns the last count.
func settledClients(t *testing.T, rdb *redis.Client, observer string, want int, limit time.Duration) int {
	t.Helper()
	n := redisClients(t, rdb, observer)
	for deadline := time.Now().Add(limit); n > want && time.Now().Before(deadline); n = redisClients(t, rdb, observer) {
		time.Sleep(50 * time.Millisecond)
	}
	return n
}

// TestReloadUnderLoad reloads Caddy's config five times through the admin
// API while traffic runs, with the same Redis settings each time: no
// request fails (no 5xx, no transport error), every reload takes effect, a
// key at its limit stays limited (state lives in Redis, across reloads),
// and once traffic stops Redis has no more connections than before the
// reloads (the shared client is kept, nothing leaks).
func TestReloadUnderLoad(t *testing.T) {
	testReloadUnderLoad(t, false)
}

// TestReloadChangingRedisSettings is TestReloadUnderLoad with reloads that
// change the Redis settings: each such reload takes a new client and the
// old config releases its own. Requests still in flight on the old config
// must not fail, and the old client's connections must be closed.
func TestReloadChangingRedisSettings(t *testing.T) {
	testReloadUnderLoad(t, true)
}

func testReloadUnderLoad(t *testing.T, changeRedis bool) {
	const workers = 3 // per path
	const observer = "drill-observer"
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ClientName: observer, PoolSize: 1})
	t.Cleanup(func() { _ = rdb.Close() })

	caddy := startCaddy(t, caddyConfig{Site: reloadSite(srv, 0, changeRedis)})
	client := newClient(2 * workers)
	if got := statuses(t, client, caddy.URL, drillEvents+1, "X-Key", "held"); !slices.Equal(got, drillLimited) {
		t.Fatalf("before the reloads: got statuses %v, want %v", got, drillLimited)
	}

	traffic := func(maxTime time.Duration) []*traffic {
		var trs []*traffic
		for _, path := range []string{"/", "/varying"} {
			trs = append(trs, startDrillTraffic(client, caddy.URL+path, workers, 100000, maxTime, func(w, i int) string {
				return fmt.Sprintf("%s-%d-%d", path, w, i%40)
			}))
		}
		return trs
	}

	// Warm up with the same traffic, so the pool holds what it needs.
	warm := traffic(10 * time.Second)
	for _, tr := range warm {
		tr.waitSent(t, 300, 10*time.Second)
		tr.stop().check(t, "warm-up", http.StatusOK, http.StatusTooManyRequests)
	}
	before := settledClients(t, rdb, observer, 0, 500*time.Millisecond)
	t.Logf("Redis clients before the reloads (traffic stopped): %d", before)

	trs := traffic(25 * time.Second)
	for v := 1; v <= 5; v++ {
		start := time.Now()
		loadCaddyfile(t, caddy, reloadCaddyfile(t, caddy, caddyConfig{Site: reloadSite(srv, v, changeRedis)}))
		want := fmt.Sprintf("v%d", v)
		var body string
		for deadline := time.Now().Add(10 * time.Second); body != want && time.Now().Before(deadline); {
			// a reload closes the old server's idle connections: a probe
			// sent on one as it closes is reset, and the next one dials anew
			if resp, err := doGet(client, caddy.URL+"/status", "X-Key", fmt.Sprintf("probe-%d-%d", v, time.Now().UnixNano())); err == nil {
				body = resp.Body
			}
		}
		if body != want {
			t.Fatalf("reload %d: got body %q, want %q", v, body, want)
		}
		t.Logf("reload %d took effect after %v", v, time.Since(start).Round(time.Millisecond))
		if got := get(t, client, caddy.URL, "X-Key", "held").Status; got != http.StatusTooManyRequests {
			t.Errorf("reload %d: key at its limit before: got status %d, want 429", v, got)
		}
		for _, tr := range trs {
			tr.waitSent(t, tr.sent.Load()+100, 10*time.Second)
		}
	}
	for _, tr := range trs {
		tr.stop().check(t, "traffic during reloads", http.StatusOK, http.StatusTooManyRequests)
	}
	if t.Failed() {
		logStoreErrors(t, caddy)
	}

	// The varying zone has the last version's limit: 105 per hour.
	if got := statuses(t, client, caddy.URL+"/varying", 106, "X-Key", "after"); !slices.Equal(got, wantStatuses(105, 1, http.StatusTooManyRequests)) {
		t.Errorf("after the reloads, zone varying (events 105): got statuses %v", got)
	}

	// Idle connections of the live client may stay; one per worker at most
	// beyond what the warm-up left, and nothing per reload.
	limit := before + 2
	after := settledClients(t, rdb, observer, limit, 10*time.Second)
	t.Logf("Redis clients after 5 reloads (traffic stopped): %d, before: %d", after, before)
	if after > limit {
		list, _ := rdb.ClientList(context.Background()).Result()
		t.Errorf("Redis clients after 5 reloads: got %d, want at most %d (before: %d): connections leak\n%s", after, limit, before, list)
	}
}
