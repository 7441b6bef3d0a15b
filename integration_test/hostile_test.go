package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// hostileAlgorithms are the algorithms the many-keys drill spreads its
// keys over, one zone each.
var hostileAlgorithms = []string{"fixed_window", "sliding_window", "sliding_log", "token_bucket"}

// hostileSite limits three kinds of request, all with failure_mode closed so
// that a failing Redis call would show as a 503: /q keyed by the query
// parameter k, /many/<algorithm> keyed by X-Key, and everything else keyed
// by X-Key.
func hostileSite(srv *redistest.Server) string {
	redis := redisBlock(srv, "timeout 5s")
	zone := func(name, key, alg string) string {
		return fmt.Sprintf(`		rate_limit {
%s			failure_mode closed
			zone %s {
				key %s
				algorithm %s
				events %d
				window 1h
			}
		}
		respond "ok" 200
`, redis, name, key, alg, drillEvents)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\thandle /q {\n%s\t}\n", zone("query", "{http.request.uri.query.k}", "sliding_log"))
	for _, alg := range hostileAlgorithms {
		fmt.Fprintf(&b, "\thandle /many/%s {\n%s\t}\n", alg, zone("many_"+alg, "{http.request.header.X-Key}", alg))
	}
	fmt.Fprintf(&b, "\thandle {\n%s\t}\n", zone("hostile", "{http.request.header.X-Key}", "sliding_log"))
	return b.String()
}

// TestHostileKeys sends keys a client controls and an attacker would
// choose: 1 MiB long, binary, full of braces and placeholder syntax, and
// 10^5 distinct ones. None gets a 5xx; each is limited as its own bucket
// (a placeholder inside a value is data, not expanded); Redis holds one
// short key with a TTL per distinct key; Caddy still serves afterwards.
func TestHostileKeys(t *testing.T) {
	srv := redistest.Start(t)
	caddy := startCaddy(t, caddyConfig{
		Global: "\tservers {\n\t\tmax_header_size 2MB\n\t}",
		Site:   hostileSite(srv),
	})
	client := newClient(4)
	rdb := srv.Client(t)

	limited := func(t *testing.T, what, url string, headers ...string) {
		t.Helper()
		if got := statuses(t, client, url, drillEvents+1, headers...); !slices.Equal(got, drillLimited) {
			t.Errorf("%s: got statuses %v, want %v", what, got, drillLimited)
		}
	}

	t.Run("1MiB_key", func(t *testing.T) {
		huge := strings.Repeat("a", 1<<20)
		limited(t, "1 MiB key", caddy.URL, "X-Key", huge)
		// Another 1 MiB key, differing in its last byte only, is its own
		// bucket.
		other := huge[:len(huge)-1] + "b"
		if got := get(t, client, caddy.URL, "X-Key", other).Status; got != http.StatusOK {
			t.Errorf("second 1 MiB key, last byte differs: got status %d, want 200", got)
		}
	})

	t.Run("binary_header", func(t *testing.T) {
		// net/http sends and accepts 0x80-0xff and tabs in a header value.
		limited(t, "binary header key", caddy.URL, "X-Key", "a\tb\x80\xff\xfe\xc3(")
		if got := get(t, client, caddy.URL, "X-Key", "a\tb\x80\xff\xfe\xc3)").Status; got != http.StatusOK {
			t.Errorf("binary header key, last byte differs: got status %d, want 200", got)
		}
	})

	t.Run("binary_query", func(t *testing.T) {
		k := string([]byte{0x00, 0xff, '\r', '\n', '{', '}', 0x01, 0x7f, '%', '&', '='})
		limited(t, "binary query key", caddy.URL+"/q?k="+url.QueryEscape(k))
		if got := get(t, client, caddy.URL+"/q?k="+url.QueryEscape(k+"x")).Status; got != http.StatusOK {
			t.Errorf("binary query key, one byte more: got status %d, want 200", got)
		}
	})

	t.Run("braces", func(t *testing.T) {
		for _, v := range []string{"{", "}", "{}", "{{", "}}{", "{ }", `\{`, "{http.request.header.X-Other}", "{env.HOME}", "{unknown}"} {
			got := get(t, client, caddy.URL, "X-Key", v, "X-Other", "other", "Y", "y")
			if got.Status != http.StatusOK {
				t.Errorf("key %q: got status %d, want 200", v, got.Status)
			}
		}
		// If the value were expanded, Y=a and Y=b would be two buckets,
		// and all six requests would pass.
		const literal = "{http.request.header.Y}"
		var got []int
		for i := range drillEvents + 1 {
			y := "a"
			if i >= 3 {
				y = "b"
			}
			got = append(got, get(t, client, caddy.URL, "X-Key", literal, "Y", y).Status)
		}
		if !slices.Equal(got, drillLimited) {
			t.Errorf("key %q with header Y a, a, a, b, b, b: got statuses %v, want %v (one bucket: the value is data, not a placeholder)", literal, got, drillLimited)
		}
	})

	t.Run("many_keys", func(t *testing.T) {
		// the many_* zones' keys only: the handler also writes, every few
		// seconds, the top offenders of the zones that denied earlier
		before := countKeys(t, rdb, "sluice:many_*")
		const want, workers, budget = 100000, 48, 20 * time.Second
		res := startTraffic(newClient(workers), trafficPlan{
			workers: workers,
			maxTime: budget,
			// Every request its own key, spread over the /many/<algorithm> zones.
			target: func(w, n int) (string, string, bool) {
				i := n*workers + w
				return caddy.URL + "/many/" + hostileAlgorithms[i%len(hostileAlgorithms)], "m-" + strconv.Itoa(i), i < want
			},
		}).wait()
		sent := int(res.sent)
		t.Logf("%d distinct keys sent in %v over %d connections (%.0f req/s), statuses %v, transport errors %d",
			sent, res.took.Round(time.Millisecond), workers, float64(sent)/res.took.Seconds(), res.byStatus, res.errs)
		if sent < want {
			t.Logf("only %d of %d keys sent within %v on this machine", sent, want, budget)
		}
		if res.errs > 0 {
			t.Fatalf("%d transport errors, first: %v", res.errs, res.firstErr)
		}
		if res.byStatus[http.StatusOK] != sent {
			t.Errorf("fresh keys: got statuses %v, want %d × 200", res.byStatus, sent)
		}
		if grew := countKeys(t, rdb, "sluice:many_*") - before; grew != sent {
			t.Errorf("the many_* zones' keys grew by %d, want %d (one key per distinct key sent)", grew, sent)
		}
		checkAllKeys(t, rdb)
	})

	if got := get(t, client, caddy.URL, "X-Key", "still-serving").Status; got != http.StatusOK {
		t.Errorf("after the hostile keys: got status %d, want 200", got)
	}
}

// checkAllKeys checks every key in rdb: at most 64 bytes, and a TTL.
func checkAllKeys(t *testing.T, rdb *redis.Client) {
	t.Helper()
	ctx := context.Background()
	var cursor uint64
	checked, long, noTTL := 0, 0, 0
	for range 100000 { // bounded: SCAN returns 1000 keys or so per call
		keys, next, err := rdb.Scan(ctx, cursor, "*", 1000).Result()
		if err != nil {
			t.Fatalf("SCAN: %v", err)
		}
		pipe := rdb.Pipeline()
		ttls := make([]*redis.DurationCmd, len(keys))
		for i, k := range keys {
			ttls[i] = pipe.PTTL(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("PTTL: %v", err)
		}
		for i, k := range keys {
			checked++
			if len(k) > 64 {
				if long++; long <= 3 {
					t.Errorf("Redis key %q: %d bytes, want at most 64", k, len(k))
				}
			}
			if ttl := ttls[i].Val(); ttl <= 0 {
				if noTTL++; noTTL <= 3 {
					t.Errorf("Redis key %q: PTTL %v, want > 0", k, ttl)
				}
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	t.Logf("checked %d Redis keys: %d longer than 64 bytes, %d without a TTL", checked, long, noTTL)
}
