package integration_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAdaptiveMetricsAndAdmin: an adaptive zone's state shows in the
// gauges (limit, in flight, baseline), in the admin API's zone listing
// and in `caddy rate-limit zones`; its decisions are counted by class and
// outcome; its keys are not in a store (409); a burst of sheds logs one
// line that the zone started shedding.
func TestAdaptiveMetricsAndAdmin(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	caddy := startCaddy(t, caddyConfig{Global: "\tmetrics", Site: classMap + fmt.Sprintf(`	rate_limit {
		zone upstream {
			key static
			algorithm adaptive
			events 2
			priority {class} critical normal bulk
		}
	}
	reverse_proxy %s`, u.addr())})
	client := newClient(4)
	url := caddy.URL + "/"

	fast := 0
	waitUntil(t, 15*time.Second, "a baseline learned", func() (bool, string) {
		for range 10 {
			fast++
			if res := get(t, client, caddy.URL+"/fast", "X-Class", "normal"); res.Status != http.StatusOK {
				return false, fmt.Sprintf("/fast: status %d", res.Status)
			}
		}
		st := zoneState(t, caddy, "upstream")
		return st.Baseline > 0, fmt.Sprintf("%+v", st)
	})
	var held []*pending
	for i := range 2 {
		held = append(held, send(t.Context(), client, url, fmt.Sprintf("held-%d", i), "X-Class", "critical"))
		u.waitArrived(t)
	}
	for range 3 {
		get(t, client, url, "X-Class", "bulk")
	}

	// gauges and counters
	st := zoneState(t, caddy, "upstream")
	if st.Limit != 2 || st.InFlight != 2 || st.Baseline <= 0 {
		t.Errorf("admin API: %+v, want limit 2, 2 in flight and a baseline", st)
	}
	for series, want := range map[string]float64{
		`caddy_rate_limit_adaptive_limit{zone="upstream"}`:     2,
		`caddy_rate_limit_adaptive_in_flight{zone="upstream"}`: 2,
	} {
		if got := metricValue(t, caddy, series); got != want {
			t.Errorf("%s: %v, want %v", series, got, want)
		}
	}
	// (within a factor of 2: an interval the warm-up left open may end
	// between the two reads)
	if got := metricValue(t, caddy, `caddy_rate_limit_adaptive_baseline_seconds{zone="upstream"}`); got <= 0 || got > 2*st.Baseline || 2*got < st.Baseline {
		t.Errorf("caddy_rate_limit_adaptive_baseline_seconds: %v, want the admin API's %v", got, st.Baseline)
	}
	for _, c := range []struct {
		class, outcome string
		want           int
	}{{"normal", "admitted", fast}, {"critical", "admitted", 2}, {"bulk", "shed", 3}, {"bulk", "admitted", 0}, {"critical", "shed", 0}} {
		if got := decisions(t, caddy, "upstream", c.class, c.outcome); got != c.want {
			t.Errorf("decisions of class %s, outcome %s: %d, want %d", c.class, c.outcome, got, c.want)
		}
	}

	// the admin API's listing, its keys, and the CLI
	zones := listZones(t, caddy)
	if len(zones) != 1 {
		t.Fatalf("zones listed: %+v, want one", zones)
	}
	z := zones[0]
	if z.Name != "upstream" || z.Algorithm != "adaptive" || z.Events != 2 || z.Backend != "memory" || !z.Healthy || z.Adaptive == nil {
		t.Errorf("zone listed: %+v, want upstream, adaptive, events 2, backend memory, healthy, with its state", z)
	}
	if status, body := adminDo(t, http.MethodGet, caddy.AdminURL+"/rate_limit/zones/upstream/keys/static", "", nil); status != http.StatusConflict {
		t.Errorf("GET of an adaptive zone's key: %d %s, want 409 (no keys in a store)", status, body)
	}
	res := rateLimitCLI(t, "zones", "--address", strings.TrimPrefix(caddy.AdminURL, "http://"))
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if res.Code != 0 || len(lines) != 2 || !strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "),
		"upstream adaptive 2 - - memory yes limit 2, in flight 2, baseline ") || strings.HasSuffix(lines[1], "baseline -") {
		t.Errorf("caddy rate-limit zones: exit %d, printed:\n%s\nstderr: %s\nwant upstream's line with its limit 2, 2 in flight and its baseline",
			res.Code, res.Stdout, res.Stderr)
	}

	// one log line for the burst of sheds
	waitUntil(t, 10*time.Second, "a log line that the zone started shedding", func() (bool, string) {
		return strings.Contains(caddy.Log.String(), "started shedding"), "none"
	})
	if n := strings.Count(caddy.Log.String(), "started shedding"); n != 1 {
		t.Errorf("%d log lines that the zone started shedding, want 1 for one burst", n)
	}

	u.releaseAll()
	for _, p := range held {
		p.wait(t)
	}
	waitUntil(t, 10*time.Second, "the in-flight gauge back to 0", func() (bool, string) {
		got := metricValue(t, caddy, `caddy_rate_limit_adaptive_in_flight{zone="upstream"}`)
		return got == 0, fmt.Sprint(got)
	})
}
