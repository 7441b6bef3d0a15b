package integration_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// reloadableSite is an adaptive zone with the given events, adaptive
// block lines, classes and extra lines, max_delay 30s, in front of
// upstream; the global `metrics` option lets waitInCaddy see the queue.
func reloadableSite(events int, adaptiveLines, classes, extra, upstream string) caddyConfig {
	return caddyConfig{Global: "\tmetrics", Site: classMap + fmt.Sprintf(`	rate_limit {
		zone upstream {
			key static
			algorithm adaptive
			events %d
			adaptive {
%s			}
			priority {class} %s
			max_delay 30s
%s		}
	}
	reverse_proxy %s`, events, adaptiveLines, classes, extra, upstream)}
}

// TestAdaptiveReloadKeepsLimiter: a reload that keeps the zone's events,
// min and classes keeps its limiter, whatever else changes (initial,
// tolerance, reserve): its limit (not the new initial), baseline, the
// slots in flight (given back to it once answered) and the requests
// waiting in its queue (served as slots free). A reload that changes
// events, min or the classes starts a new limiter: at the new initial,
// with no baseline and nothing in flight, and the requests still held
// under the old one do not count in the new one when they end.
func TestAdaptiveReloadKeepsLimiter(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	const classes = "critical normal bulk"
	cfg := reloadableSite(40, "\t\t\t\tmin 2\n\t\t\t\tinitial 2\n", classes, "", u.addr())
	caddy := startCaddy(t, cfg)
	client := newClient(8)
	url := caddy.URL + "/"
	reload := func(cfg caddyConfig) {
		t.Helper()
		loadCaddyfile(t, caddy, reloadCaddyfile(t, caddy, cfg))
	}

	// a baseline, from requests one at a time, in batches too small to
	// grow the limit (20 samples in an interval)
	waitUntil(t, 15*time.Second, "a baseline learned", func() (bool, string) {
		for range 5 {
			if res := get(t, client, caddy.URL+"/fast", "X-Class", "critical"); res.Status != http.StatusOK {
				return false, fmt.Sprintf("/fast: status %d", res.Status)
			}
		}
		st := zoneState(t, caddy, "upstream")
		if st.Baseline > 0 {
			return true, ""
		}
		time.Sleep(300 * time.Millisecond)
		return false, fmt.Sprintf("%+v", st)
	})
	before := zoneState(t, caddy, "upstream")
	if before.Limit != 2 {
		t.Fatalf("before the reloads: %+v, want the limit at its initial 2", before)
	}

	// two slots held and one request waiting for a slot, across a reload
	// that changes initial, tolerance and reserve
	var held []*pending
	for i := range 2 {
		held = append(held, send(t.Context(), client, url, fmt.Sprintf("held-%d", i), "X-Class", "critical"))
		u.waitArrived(t)
	}
	queued := send(t.Context(), client, url, "queued", "X-Class", "critical")
	waitInCaddy(t, caddy, 3)
	reload(reloadableSite(40, "\t\t\t\tmin 2\n\t\t\t\tinitial 5\n\t\t\t\ttolerance 2\n", classes, "\t\t\treserve 30%\n", u.addr()))
	// (the baseline may still move with the samples of an interval the
	// warm-up left open: kept is not 0, a new limiter's)
	if st := zoneState(t, caddy, "upstream"); st.Limit != 2 || st.InFlight != 2 || st.Baseline <= 0 {
		t.Errorf("after a reload that keeps events, min and classes: %+v, want limit 2, 2 in flight and a baseline (%v before): kept",
			st, before.Baseline)
	}
	u.releaseOne()
	if got := u.waitArrived(t); got != "queued" {
		t.Fatalf("a slot freed after the reload: %q reached the upstream, want the request queued before it", got)
	}
	held = append(held, queued)
	u.releaseOne()
	u.releaseOne()
	for _, p := range held {
		if res := p.wait(t); res.Status != http.StatusOK {
			t.Errorf("%s: status %d, want 200", p.tag, res.Status)
		}
	}
	waitInFlight(t, caddy, "upstream", 0)

	// each change of events, min or classes starts anew, at its initial,
	// while a request held under the old limiter is still at the upstream
	for _, c := range []struct {
		what    string
		cfg     caddyConfig
		initial int
	}{
		{"events 41", reloadableSite(41, "\t\t\t\tmin 2\n\t\t\t\tinitial 5\n", classes, "", u.addr()), 5},
		{"min 3", reloadableSite(41, "\t\t\t\tmin 3\n\t\t\t\tinitial 4\n", classes, "", u.addr()), 4},
		{"classes critical bulk", reloadableSite(41, "\t\t\t\tmin 3\n\t\t\t\tinitial 3\n", "critical bulk", "", u.addr()), 3},
	} {
		old := send(t.Context(), client, url, "old "+c.what, "X-Class", "critical")
		u.waitArrived(t)
		reload(c.cfg)
		// a key's limiter is made at its first request
		if res := get(t, client, caddy.URL+"/fast", "X-Class", "critical"); res.Status != http.StatusOK {
			t.Fatalf("after a reload that changes %s: /fast got %d, want 200", c.what, res.Status)
		}
		if st := zoneState(t, caddy, "upstream"); st != (adaptiveState{Limit: c.initial}) {
			t.Errorf("after a reload that changes %s: %+v, want a new limiter: limit %d, none in flight, no baseline",
				c.what, st, c.initial)
		}
		u.releaseOne()
		if res := old.wait(t); res.Status != http.StatusOK {
			t.Errorf("%s: status %d, want 200", old.tag, res.Status)
		}
		waitInCaddy(t, caddy, 0)
		if st := zoneState(t, caddy, "upstream"); st.InFlight != 0 {
			t.Errorf("after the request held across the change of %s ended: %+v, want 0 in flight in the new limiter", c.what, st)
		}
	}
}
