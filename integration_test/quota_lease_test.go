package integration_test

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestQuotaLeaseFlood: three Caddy instances on one Redis flood one hot
// key (key static) together at three times its limit for three windows,
// quota_lease at its default, for each algorithm. However leases move the
// decisions into the instances, no window or interval of the definition
// holds more admissions than it allows (admissions_test.go: each
// request's own round trip is its margin): fixed_window no epoch-aligned
// window over events, sliding_window and sliding_log no trailing window
// over events, token_bucket no interval over burst + rate × its length.
// And the fleet is not far under the definition: it admits at least half
// of what the definition allows of the requests sent (allowedPerWindow;
// token_bucket: its burst and its rate over the run, at most the requests
// sent).
func TestQuotaLeaseFlood(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	const (
		events   = 300
		window   = 2 * time.Second
		windows  = 3
		replicas = 3
		overload = 3  // times the limit's rate
		workers  = 32 // senders: enough to keep the pace when a request waits on Redis
		minShare = 0.5
	)
	for _, algorithm := range []string{"fixed_window", "sliding_window", "sliding_log", "token_bucket"} {
		t.Run(algorithm, func(t *testing.T) {
			zone := "flood_" + algorithm
			// failure_mode closed and a long timeout: a slow decision under
			// this load shows as a 503, never as a hidden admission
			site := fmt.Sprintf(`	rate_limit {
%s		failure_mode closed
		zone %s {
			key static
			algorithm %s
			events %d
			window %v
		}
	}
	respond "ok" 200`, redisBlock(srv, "timeout 5s"), zone, algorithm, events, window)
			instances := make([]*caddyProc, replicas)
			urls := make([]string, replicas)
			for i := range instances {
				instances[i] = startCaddy(t, caddyConfig{Site: site})
				urls[i] = instances[i].URL + "/"
			}

			// Start on a window's edge (fixed windows are aligned to the
			// epoch), so the run covers whole windows of every algorithm.
			w := window.Microseconds()
			calls0 := redistest.ScriptCalls(t, rdb)
			time.Sleep(time.Until(time.UnixMicro((time.Now().UnixMicro()/w + 1) * w)))
			rate := overload * events / window.Seconds()
			results := pacedTraffic(newClient(workers), urls, rate, windows*window, workers)
			calls := redistest.ScriptCalls(t, rdb) - calls0

			var adm []admission
			perInstance := make([]int, replicas)
			byStatus := map[int]int{}
			first, lastSent, last := results[0].sent, results[0].sent, results[0].recv
			for _, r := range results {
				first, lastSent, last = min(first, r.sent), max(lastSent, r.sent), max(last, r.recv)
				if r.err != nil {
					t.Errorf("request to %s: %v", urls[r.target], r.err)
					continue
				}
				byStatus[r.status]++
				switch r.status {
				case http.StatusOK:
					adm = append(adm, admission{r.sent, r.recv})
					perInstance[r.target]++
				case http.StatusTooManyRequests:
				default:
					t.Errorf("request to %s: status %d, want 200 or 429", urls[r.target], r.status)
				}
			}
			span := last - first
			sending := lastSent - first // the run, over which a token bucket refills
			t.Logf("%d requests in %v (%.0f/s, %d× the limit's %.0f/s): statuses %v, admitted per instance %v; %d script calls (%.3f per request); quota lease grants per instance %v",
				len(results), time.Duration(span)*time.Microsecond, float64(len(results))/(float64(span)/1e6), overload, events/window.Seconds(),
				byStatus, perInstance, calls, float64(calls)/float64(len(results)), leaseGrants(t, instances, zone))

			var allowed int64 // what the definition allows over the run
			switch algorithm {
			case "fixed_window":
				start, n := worstFixedWindow(adm, w)
				t.Logf("busiest fixed window [%v, +%v): %d admitted wholly inside it, limit %d", clock(start), window, n, events)
				if n > events {
					t.Errorf("fixed window starting %v: %d admissions wholly inside it, want at most %d", clock(start), n, events)
				}
				allowed = allowedPerWindow(results, 0, w, events)
			case "sliding_window", "sliding_log":
				end, n := worstTrailingWindow(adm, w)
				t.Logf("busiest trailing window (-%v, %v]: %d admitted wholly inside it, limit %d", window, clock(end), n, events)
				if n > events {
					t.Errorf("trailing window ending %v: %d admissions wholly inside it, want at most %d", clock(end), n, events)
				}
				allowed = allowedPerWindow(results, first, w, events)
			case "token_bucket":
				from, to, n, excess := bucketExcess(adm, events, events, w)
				bound := float64(events) + float64(events)*float64(to-from)/float64(w)
				t.Logf("tightest interval [%v, %v]: %d admitted wholly inside it, bound burst + rate × length = %.2f", clock(from), clock(to), n, bound)
				if excess > 0 {
					t.Errorf("interval [%v, %v]: %d admissions wholly inside it, want at most burst + rate × length = %.2f", clock(from), clock(to), n, bound)
				}
				allowed = events + events*sending/w
			}
			allowed = min(allowed, int64(len(results))) // token_bucket's bound may exceed what was sent
			share := float64(len(adm)) / float64(allowed)
			t.Logf("admitted %d of the %d the definition allows over the run (or requests sent): %.2f", len(adm), allowed, share)
			if share < minShare {
				t.Errorf("admitted %d, %.2f of the %d the definition allows over the run, want at least %.2f", len(adm), share, allowed, minShare)
			}
		})
	}
}

// TestQuotaLeaseScriptCalls: one Caddy, one hot key, a steady load well
// under the limit, one request at a time (so no batching shares a call):
// with quota leases (the default) the instance decides most requests from
// its leases, under half a script call per request (it is far lower:
// logged); with quota_lease off every request is at least one call.
// Each algorithm, two zones of one Caddy told apart by path.
func TestQuotaLeaseScriptCalls(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	const (
		rate     = 250 // requests per second
		duration = 1500 * time.Millisecond
		leasedAt = 0.5 // the most script calls per request with leases
	)
	for _, tt := range []struct{ algorithm, limit string }{
		{"fixed_window", "events 1000000\n\t\t\twindow 1m"},
		{"sliding_window", "events 1000000\n\t\t\twindow 1m"},
		{"sliding_log", "events 10000\n\t\t\twindow 1h"},
		{"token_bucket", "events 1000000\n\t\t\twindow 1m"},
	} {
		t.Run(tt.algorithm, func(t *testing.T) {
			leased, direct := "leased_"+tt.algorithm, "direct_"+tt.algorithm
			p := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
%s		failure_mode closed
		zone %s {
			match path /on
			key static
			algorithm %s
			%s
		}
		zone %s {
			match path /off
			key static
			algorithm %s
			%s
			quota_lease off
		}
	}
	respond "ok" 200`, redisBlock(srv, "timeout 5s"), leased, tt.algorithm, tt.limit, direct, tt.algorithm, tt.limit)})
			client := newClient(1)

			perRequest := func(path string) (float64, int) {
				t.Helper()
				calls0 := redistest.ScriptCalls(t, rdb)
				results := pacedTraffic(client, []string{p.URL + path}, rate, duration, 1)
				calls := redistest.ScriptCalls(t, rdb) - calls0
				for _, r := range results {
					if r.err != nil || r.status != http.StatusOK {
						t.Fatalf("%s: status %d, error %v; want every request admitted (the load is well under the limit)", path, r.status, r.err)
					}
				}
				return float64(calls) / float64(len(results)), len(results)
			}

			off, n := perRequest("/off")
			t.Logf("quota_lease off: %d requests, %.3f script calls per request", n, off)
			if off < 1 {
				t.Errorf("quota_lease off: %.3f script calls per request, want at least 1 (every decision a Redis call)", off)
			}
			on, n := perRequest("/on")
			t.Logf("quota leases on (default): %d requests, %.3f script calls per request; lease units %v", n, on, leaseUnits(t, p, leased))
			if on >= leasedAt {
				t.Errorf("quota leases on: %.3f script calls per request, want under %.2f (a hot key is decided from leases)", on, leasedAt)
			}
		})
	}
}

// TestQuotaLeaseBanReachesHolder: two instances on one Redis, a zone with
// a ban and quota_lease 10s on one hot key. B serves a steady stream from
// its leases until it holds more leased units than it could use in the
// bound below; then one request on A trips the ban (a cost of the whole
// limit: denied even with B's units out counted as free). B must refuse
// the key within 2 s, polling every 25 ms (at most 80 requests, fewer
// than it holds): the ban's announcement on the reset channel drops its
// lease, where without it B would admit from the lease for seconds.
func TestQuotaLeaseBanReachesHolder(t *testing.T) {
	srv := redistest.Start(t)
	const (
		events    = 10000
		zone      = "hot"
		trickle   = 10 * time.Millisecond // B's steady stream: 100/s
		poll      = 25 * time.Millisecond
		bound     = 2 * time.Second
		mustHold  = int64(bound/poll) + 20 // B's leased units before the trip
		warmLimit = 20 * time.Second
	)
	// sliding_log: a lease ends at its own time, with no window edge
	// inside the test (a fixed window's or a slot's) to cut it short.
	site := fmt.Sprintf(`	rate_limit {
%s		failure_mode closed
		zone %s {
			key static
			algorithm sliding_log
			events %d
			window 1h
			cost {http.request.header.X-Cost}
			ban 1h
			quota_lease 10s
		}
	}
	respond "ok" 200`, redisBlock(srv, "timeout 5s"), zone, events)
	a := startCaddy(t, caddyConfig{Site: site})
	b := startCaddy(t, caddyConfig{Site: site})
	waitMetric(t, b, `caddy_rate_limit_reset_subscription_live{redis="`+srv.Addr+`"}`, 1)
	client := newClient(2)
	units := streamUntilHeld(t, client, b, zone, trickle, mustHold, warmLimit)

	trip := get(t, client, a.URL+"/", "X-Cost", strconv.Itoa(events))
	tripped := time.Now()
	if retry, _ := strconv.Atoi(trip.Header.Get("Retry-After")); trip.Status != http.StatusTooManyRequests || retry < 3590 {
		t.Fatalf("A, a request of cost %d: status %d, Retry-After %q; want 429 and about 3600 (the ban tripped)", events, trip.Status, trip.Header.Get("Retry-After"))
	}

	r, admitted := refusedWithin(t, client, b, tripped, bound, poll, units)
	if retry, _ := strconv.Atoi(r.Header.Get("Retry-After")); retry < 3590 {
		t.Errorf("B refused with Retry-After %q, want about 3600 (the ban)", r.Header.Get("Retry-After"))
	}
	t.Logf("B refused %v after the ban on A, having admitted %d since (it held %d leased units)", time.Since(tripped).Round(time.Millisecond), admitted, units.held())
	if got := statuses(t, client, b.URL+"/", 3); got[0] != 429 || got[1] != 429 || got[2] != 429 {
		t.Errorf("B after the refusal: %v, want 429s (the ban holds)", got)
	}
}

// TestQuotaLeaseOverrideReachesHolder: as TestQuotaLeaseBanReachesHolder,
// with an override instead of a ban: A's admin API sets the hot key's
// limit to 1, far under what B has admitted. B must refuse the key within
// 2 s (the override's announcement drops its lease), where without it B
// would admit from its lease, granted under the zone's limit, for
// seconds.
func TestQuotaLeaseOverrideReachesHolder(t *testing.T) {
	srv := redistest.Start(t)
	const (
		zone      = "hot_override"
		trickle   = 10 * time.Millisecond
		poll      = 25 * time.Millisecond
		bound     = 2 * time.Second
		mustHold  = int64(bound/poll) + 20
		warmLimit = 20 * time.Second
	)
	site := fmt.Sprintf(`	rate_limit {
%s		failure_mode closed
		zone %s {
			key static
			algorithm sliding_log
			events 10000
			window 1h
			overrides
			quota_lease 10s
		}
	}
	respond "ok" 200`, redisBlock(srv, "timeout 5s"), zone)
	a := startCaddy(t, caddyConfig{Site: site})
	b := startCaddy(t, caddyConfig{Site: site})
	waitMetric(t, b, `caddy_rate_limit_reset_subscription_live{redis="`+srv.Addr+`"}`, 1)
	client := newClient(2)
	units := streamUntilHeld(t, client, b, zone, trickle, mustHold, warmLimit)

	if status, body := adminDo(t, http.MethodPut, a.AdminURL+"/rate_limit/zones/"+zone+"/keys/static/limit", "application/json", []byte(`{"events":1}`)); status != http.StatusOK && status != http.StatusNoContent {
		t.Fatalf("PUT the override on A: %d %s", status, body)
	}
	set := time.Now()
	r, admitted := refusedWithin(t, client, b, set, bound, poll, units)
	if r.Header.Get("RateLimit-Limit") != "1" {
		t.Errorf("B's refusal: RateLimit-Limit %q, want 1 (the override)", r.Header.Get("RateLimit-Limit"))
	}
	t.Logf("B refused %v after the override on A, having admitted %d since (it held %d leased units)", time.Since(set).Round(time.Millisecond), admitted, units.held())
}

// refusedWithin polls c every poll until it answers 429, and returns that
// response and the requests it admitted meanwhile, failing t when it
// still admits bound after since (units: what its leases held then).
func refusedWithin(t *testing.T, client *http.Client, c *caddyProc, since time.Time, bound, poll time.Duration, units quotaLeaseUnits) (response, int) {
	t.Helper()
	for admitted := 0; ; admitted++ {
		r := get(t, client, c.URL+"/")
		if r.Status == http.StatusTooManyRequests {
			return r, admitted
		}
		if r.Status != http.StatusOK {
			t.Fatalf("status %d, want 200 (from a lease) or 429", r.Status)
		}
		if time.Since(since) > bound {
			t.Fatalf("%v later: still admitting (%d since, from leases holding %d units); want a refusal within %v (the reset channel drops the leases)",
				time.Since(since).Round(time.Millisecond), admitted, units.held(), bound)
		}
		time.Sleep(poll)
	}
}

// TestQuotaLeaseReloadGivesBack: a reload gives back the leases of the
// config it unloads. One instance serves a steady stream of one key from
// quota_lease 10s leases until it holds some units; then a reload turns
// leases off. Redis must count the held units free again within 3 s,
// where their leases would hold them for up to 10 s more.
func TestQuotaLeaseReloadGivesBack(t *testing.T) {
	srv := redistest.Start(t)
	const (
		zone      = "reloaded"
		mustHold  = 50
		warmLimit = 20 * time.Second
	)
	// sliding_log: a lease ends at its own time, with no window edge
	// inside the test (a fixed window's or a slot's) to cut it short.
	site := func(quotaLease string) string {
		return fmt.Sprintf(`	rate_limit {
%s		zone %s {
			key static
			algorithm sliding_log
			events 10000
			window 1h
			quota_lease %s
		}
	}
	respond "ok" 200`, redisBlock(srv, "timeout 5s"), zone, quotaLease)
	}
	caddy := startCaddy(t, caddyConfig{Site: site("10s")})
	units := streamUntilHeld(t, newClient(1), caddy, zone, 10*time.Millisecond, mustHold, warmLimit)
	before, _ := keyRemaining(t, caddy.AdminURL, zone, "static") // the held units counted as taken
	loadCaddyfile(t, caddy, reloadCaddyfile(t, caddy, caddyConfig{Site: site("off")}))
	want := before + units.held()
	waitUntil(t, 3*time.Second, fmt.Sprintf("Redis's remaining back to %d (%d, plus the %d leased units held)", want, before, units.held()), func() (bool, string) {
		remaining, _ := keyRemaining(t, caddy.AdminURL, zone, "static")
		return remaining >= want, fmt.Sprintf("remaining %d", remaining)
	})
}

// streamUntilHeld sends c a steady stream, one request every trickle,
// until its leases of zone hold at least mustHold units (failing t after
// warmLimit, or on a request not admitted), and returns its lease units.
func streamUntilHeld(t *testing.T, client *http.Client, c *caddyProc, zone string, trickle time.Duration, mustHold int64, warmLimit time.Duration) quotaLeaseUnits {
	t.Helper()
	stop := make(chan struct{})
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		streamed int
		bad      []string
	)
	wg.Go(func() {
		tick := time.NewTicker(trickle)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			resp, err := doGet(client, c.URL+"/")
			mu.Lock()
			streamed++
			if err != nil || resp.Status != http.StatusOK {
				bad = append(bad, fmt.Sprintf("status %d, error %v", resp.Status, err))
			}
			mu.Unlock()
		}
	})
	var units quotaLeaseUnits
	for deadline := time.Now().Add(warmLimit); ; time.Sleep(50 * time.Millisecond) {
		if units = leaseUnits(t, c, zone); units.held() >= mustHold {
			break
		}
		if time.Now().After(deadline) {
			close(stop)
			wg.Wait()
			t.Fatalf("after %v of a steady stream (%d requests): %d leased units held (%v), want at least %d", warmLimit, streamed, units.held(), units, mustHold)
		}
	}
	close(stop)
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("the stream, under the limit: %d of %d not admitted, the first: %s", len(bad), streamed, bad[0])
	}
	units = leaseUnits(t, c, zone)
	t.Logf("after %d requests: %d leased units held (%v)", streamed, units.held(), units)
	return units
}

// clock is a wall-clock time in µs as a log shows it.
func clock(us int64) string { return time.UnixMicro(us).UTC().Format("15:04:05.000000") }

// allowedPerWindow is the most a limit of events per window admits of
// results: per window of length w (µs) from origin, the smaller of events
// and the requests sent in it. A fixed window's windows start at the
// epoch (origin 0); for a trailing-window limit starting empty, windows
// counted from the first request bound it the same way (each holds at
// most events, and none admits more than was sent in it).
func allowedPerWindow(results []pacedResult, origin, w, events int64) int64 {
	sent := map[int64]int64{}
	for _, r := range results {
		sent[(r.sent-origin)/w]++
	}
	var allowed int64
	for _, n := range sent {
		allowed += min(events, n)
	}
	return allowed
}

// quotaLeaseUnits is an instance's caddy_rate_limit_quota_lease_units_total
// of one zone, by kind (-1: the series is missing).
type quotaLeaseUnits struct {
	granted, used, returned, expired, refused int64
}

// held is the units granted to the instance and neither used, given back
// (taken or refused) nor expired: what its live leases hold.
func (u quotaLeaseUnits) held() int64 {
	return u.granted - u.used - u.returned - u.expired - u.refused
}

func (u quotaLeaseUnits) String() string {
	return fmt.Sprintf("granted %d, used %d, returned %d, expired %d, refused %d", u.granted, u.used, u.returned, u.expired, u.refused)
}

func leaseUnits(t *testing.T, c *caddyProc, zone string) quotaLeaseUnits {
	t.Helper()
	of := func(kind string) int64 {
		return int64(metricValue(t, c, `caddy_rate_limit_quota_lease_units_total{kind="`+kind+`",zone="`+zone+`"}`))
	}
	return quotaLeaseUnits{granted: of("granted"), used: of("used"), returned: of("returned"), expired: of("expired"), refused: of("refused")}
}

// leaseGrants is each instance's quota leases granted in zone (-1: the
// series is missing).
func leaseGrants(t *testing.T, instances []*caddyProc, zone string) []int64 {
	t.Helper()
	grants := make([]int64, len(instances))
	for i, c := range instances {
		grants[i] = int64(metricValue(t, c, `caddy_rate_limit_quota_lease_grants_total{zone="`+zone+`"}`))
	}
	return grants
}
