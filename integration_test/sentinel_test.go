package integration_test

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// failoverTimeout bounds how long Sentinel may take to promote the replica,
// and then how long Caddy may take to follow the new master.
const failoverTimeout = 15 * time.Second

// TestSentinelFailover: Caddy finds the master through three sentinels;
// limiting works; under traffic, a forced SENTINEL FAILOVER promotes the
// replica, and Caddy follows it without a restart: a fresh key is limited
// again, on the new master, within failoverTimeout, and still after
// Sentinel has turned the old master into a replica. No request ever gets a
// 5xx.
func TestSentinelFailover(t *testing.T) {
	const events = 5
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
`, path, addrs[0], addrs[1], addrs[2], ss.MasterName, name, events)
	}
	caddy := startCaddy(t, caddyConfig{Site: zone("traffic", "/traffic") + zone("probe", "/probe")})
	client := newClient(4)
	limited := wantStatuses(events, 1, http.StatusTooManyRequests)
	probe := caddy.URL + "/probe"

	// failure_mode open with a 200ms timeout: on a busy machine the first
	// decision (sentinel lookup, dial, script load) may time out and admit,
	// so even before the failover a probe may need a second try.
	attempt := 0
	if !probeUntilLimited(t, client, probe, ss.Master.Client(t), limited, &attempt) {
		t.Fatalf("before the failover: limiting did not work within %v", failoverTimeout)
	}

	// Traffic on fresh keys through the whole failover. failure_mode open:
	// while the master moves, a decision may fail (the old master refuses
	// writes as a replica, or the connection drops) and the request is
	// admitted; that is allowed. A 5xx or a failed request never is.
	traffic := startTraffic(client, caddy.URL+"/traffic", 3*failoverTimeout)
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
	if !probeUntilLimited(t, client, probe, newMaster, limited, &attempt) {
		t.Fatalf("limiting on the new master did not resume within %v of the switch", failoverTimeout)
	}
	t.Logf("limiting on the new master resumed %v after SENTINEL FAILOVER, on probe %d", since(), attempt)

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
	if !probeUntilLimited(t, client, probe, newMaster, limited, &attempt) {
		t.Fatalf("limiting stopped working once the old master became a replica")
	}
	t.Logf("limiting works after the old master became a replica, %v after SENTINEL FAILOVER, on probe %d", since(), attempt)

	sent, bad := traffic.stop()
	t.Logf("traffic during the failover: %d requests, statuses %v", sent, traffic.counts())
	if len(bad) > 0 {
		t.Errorf("traffic during the failover: %d requests got a 5xx or failed; the first: %v", traffic.badCount(), bad)
	}
	if sent == 0 {
		t.Error("the traffic goroutine sent no request")
	}
	// failure_mode open admitted whatever failed; say whether anything did.
	t.Logf("caddy logged %d store-failure lines during the failover", strings.Count(caddy.Log.String(), "rate limit store failed"))
}

// probeUntilLimited sends probes, each on a fresh key, until one is limited
// (events admitted, then a rejection) and its key appeared on master, for at
// most failoverTimeout. A probe that failed open admits its last request,
// or leaves its key elsewhere, and does not count.
func probeUntilLimited(t *testing.T, client *http.Client, url string, master *redis.Client, limited []int, attempt *int) bool {
	t.Helper()
	var got []int
	var before, after int
	for deadline := time.Now().Add(failoverTimeout); time.Now().Before(deadline); {
		*attempt++
		before = countKeys(t, master, "sluice:probe:*")
		got = statuses(t, client, url, len(limited), "X-Key", fmt.Sprintf("probe-%d", *attempt))
		after = countKeys(t, master, "sluice:probe:*")
		if slices.Equal(got, limited) && after == before+1 {
			return true
		}
	}
	t.Logf("last probe: statuses %v (want %v), probe keys on the master %d → %d (want one more)", got, limited, before, after)
	return false
}

// countKeys counts the keys matching pattern; only the probes write them,
// so there are few.
func countKeys(t *testing.T, c *redis.Client, pattern string) int {
	t.Helper()
	keys, err := c.Keys(t.Context(), pattern).Result()
	if err != nil {
		t.Fatalf("KEYS %s: %v", pattern, err)
	}
	return len(keys)
}

// trafficRun is one goroutine that sends requests on fresh keys until
// stopped or until its time is up.
type trafficRun struct {
	done   chan struct{}
	ended  chan struct{}
	once   sync.Once
	mu     sync.Mutex
	sent   int
	nbad   int      // 5xx statuses and transport errors
	bad    []string // the first few of them
	status map[int]int
}

func startTraffic(client *http.Client, url string, limit time.Duration) *trafficRun {
	r := &trafficRun{done: make(chan struct{}), ended: make(chan struct{}), status: map[int]int{}}
	go func() {
		defer close(r.ended)
		for i, deadline := 0, time.Now().Add(limit); time.Now().Before(deadline); i++ {
			select {
			case <-r.done:
				return
			default:
			}
			resp, err := doGet(client, url, "X-Key", fmt.Sprintf("traffic-%d", i))
			r.mu.Lock()
			r.sent++
			switch {
			case err != nil:
				r.addBad(fmt.Sprintf("request %d: %v", i, err))
			case resp.Status >= 500:
				r.addBad(fmt.Sprintf("request %d: status %d: %s", i, resp.Status, resp.Body))
			}
			if err == nil {
				r.status[resp.Status]++
			}
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *trafficRun) addBad(s string) {
	r.nbad++
	if len(r.bad) < 10 {
		r.bad = append(r.bad, s)
	}
}

// stop ends the traffic and returns how many requests were sent and the bad
// outcomes.
func (r *trafficRun) stop() (int, []string) {
	r.once.Do(func() { close(r.done) })
	<-r.ended
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent, r.bad
}

func (r *trafficRun) badCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nbad
}

func (r *trafficRun) counts() map[int]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.status)
}
