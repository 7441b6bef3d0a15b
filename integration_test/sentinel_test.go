package integration_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// failoverTimeout bounds how long Sentinel may take to promote the replica,
// and then how long Caddy may take to follow the new master.
const failoverTimeout = 15 * time.Second

// sentinelEvents is the limit of the failover drill's zones, per hour.
const sentinelEvents = 5

// TestSentinelFailover: Caddy finds the master through three sentinels;
// limiting works; under traffic, a forced SENTINEL FAILOVER promotes the
// replica, and Caddy follows it without a restart: a fresh key is limited
// again, on the new master, within failoverTimeout, and still after
// Sentinel has turned the old master into a replica. No request ever gets a
// 5xx.
func TestSentinelFailover(t *testing.T) {
	ss := redistest.StartSentinels(t, 3)
	addrs := ss.SentinelAddrs()
	// Two zones on one shared client: the traffic's keys stay apart from
	// the probes', so the probes' keys can be counted on each node.
	zone := func(name, path string) string {
		return fmt.Sprintf(`	handle %s {
		rate_limit {
			redis {
				addresses %s %s %s
				master_name %s
				timeout 200ms
			}
			failure_mode open
			zone %s {
				key {http.request.header.X-Key}
				algorithm sliding_log
				events %d
				window 1h
			}
		}
		respond "ok" 200
	}
`, path, addrs[0], addrs[1], addrs[2], ss.MasterName, name, sentinelEvents)
	}
	caddy := startCaddy(t, caddyConfig{Site: zone("traffic", "/traffic") + zone("probe", "/probe")})
	client := newClient(4)
	probe := caddy.URL + "/probe"

	// failure_mode open with a 200ms timeout: on a busy machine the first
	// decision (sentinel lookup, dial, script load) may time out and admit,
	// so even before the failover a probe may need a second try.
	waitLimiting(t, client, probeOn(t, ss.Master.Client(t), "before the failover", probe, "before-"))

	// Traffic on fresh keys through the whole failover. failure_mode open:
	// while the master moves, a decision may fail (the old master refuses
	// writes as a replica, or the connection drops) and the request is
	// admitted; that is allowed. A 5xx or a failed request never is.
	traffic := startTraffic(client, trafficPlan{
		workers: 1,
		maxTime: 3 * failoverTimeout,
		target: func(_, n int) (string, string, bool) {
			return caddy.URL + "/traffic", fmt.Sprintf("traffic-%d", n), true
		},
	})
	defer traffic.stop()

	sentinel := ss.SentinelClient(t, 0)
	if err := sentinel.Failover(t.Context(), ss.MasterName).Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	failoverAt := time.Now()
	since := func() time.Duration { return time.Since(failoverAt).Round(time.Millisecond) }

	var master string
	for deadline := time.Now().Add(failoverTimeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		addr, err := ss.MasterAddr(t.Context(), sentinel)
		if err == nil {
			master = addr
		}
		if master == ss.Replica.Addr {
			break
		}
	}
	if master != ss.Replica.Addr {
		t.Fatalf("sentinel reports master %s after %v, want the old replica %s", master, failoverTimeout, ss.Replica.Addr)
	}
	t.Logf("sentinel reports the new master %s %v after SENTINEL FAILOVER", master, since())

	// The old master keeps accepting writes until Sentinel reconfigures it
	// (seconds later), and the promoted replica no longer follows it: a
	// probe counts as resumed only if it is limited and its key is on the
	// new master.
	newMaster := ss.Replica.Client(t)
	_, attempts := waitLimiting(t, client, probeOn(t, newMaster, "limiting on the new master after the switch", probe, "switched-"))
	t.Logf("limiting on the new master resumed %v after SENTINEL FAILOVER, on probe %d", since(), attempts)

	oldMaster := ss.Master.Client(t)
	demoted := false
	for deadline := time.Now().Add(failoverTimeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		info, err := oldMaster.Info(t.Context(), "replication").Result()
		if demoted = err == nil && strings.Contains(info, "role:slave"); demoted {
			break
		}
	}
	if !demoted {
		t.Fatalf("the old master %s is not a replica %v after the switch", ss.Master.Addr, failoverTimeout)
	}
	t.Logf("the old master is a replica %v after SENTINEL FAILOVER", since())
	_, attempts = waitLimiting(t, client, probeOn(t, newMaster, "limiting once the old master became a replica", probe, "demoted-"))
	t.Logf("limiting works after the old master became a replica, %v after SENTINEL FAILOVER, on probe %d", since(), attempts)

	res := traffic.stop()
	t.Logf("traffic during the failover: %d requests, statuses %v", res.sent, res.byStatus)
	if res.bad > 0 {
		t.Errorf("traffic during the failover: %d requests got a 5xx or failed; the first: %v", res.bad, res.firstBad)
	}
	if res.sent == 0 {
		t.Error("the traffic goroutine sent no request")
	}
	// failure_mode open admitted whatever failed; say whether anything did.
	t.Logf("caddy logged %d store-failure lines during the failover", strings.Count(caddy.Log.String(), "rate limit store failed"))
}

// probeOn is the probe of the failover: a fresh key at url is limited
// (events admitted, then a rejection) and its key appeared on master, within
// failoverTimeout. A probe that failed open admits its last request, or
// leaves its key elsewhere, and does not count.
func probeOn(t *testing.T, master *redis.Client, what, url, prefix string) limitProbe {
	return limitProbe{
		what: what, url: url, prefix: prefix, within: failoverTimeout,
		want: wantStatuses(sentinelEvents, 1, http.StatusTooManyRequests),
		keys: func() (int64, error) { return int64(countKeys(t, master, "sluice:probe:*")), nil },
	}
}

// countKeys counts the keys matching pattern with KEYS (the test owns the
// server, and its keys number at most a few hundred thousand).
func countKeys(t *testing.T, c *redis.Client, pattern string) int {
	t.Helper()
	keys, err := c.Keys(t.Context(), pattern).Result()
	if err != nil {
		t.Fatalf("KEYS %s: %v", pattern, err)
	}
	return len(keys)
}
