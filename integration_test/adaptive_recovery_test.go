package integration_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAdaptiveRecovers: an upstream of 8 workers, 25 ms each, under
// light traffic (4 clients) teaches the zone its baseline. Then it loses
// three quarters of its workers while 16 clients send one request after
// another: the latency passes tolerance × baseline, the limit falls to
// half of what it was or less, requests are shed, and the zone logs once
// that it started shedding. Then the workers come back: the limit grows
// back to where it was, the light traffic is served without a request
// shed, and once it has shed nothing for 10 s the zone logs once that it
// stopped.
func TestAdaptiveRecovers(t *testing.T) {
	withoutRedis(t)
	u := startCapacityUpstream(t, 8, 25*time.Millisecond)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
		zone upstream {
			key static
			algorithm adaptive
			events 32
			adaptive {
				min 2
				initial 8
			}
		}
	}
	reverse_proxy %s`, u.addr())})
	client := newClient(20)
	url := caddy.URL + "/"
	state := func() adaptiveState { return zoneState(t, caddy, "upstream") }

	light := startClassTraffic(client, url, map[string]int{"light": 4}, 20*time.Millisecond)
	defer light.stop()
	waitBaseline(t, caddy, "upstream")
	healthy := state()
	t.Logf("healthy: %+v", healthy)

	u.setWorkers(2)
	heavy := startClassTraffic(client, url, map[string]int{"heavy": 16}, 20*time.Millisecond)
	defer heavy.stop()
	var degraded adaptiveState
	waitUntil(t, 15*time.Second, fmt.Sprintf("the limit at most half of %d, and requests shed", healthy.Limit), func() (bool, string) {
		st := state()
		_, shed := total(heavy.snapshot(), "heavy", http.StatusServiceUnavailable)
		degraded = st
		return 2*st.Limit <= healthy.Limit && shed > 0, fmt.Sprintf("%+v, %d shed", st, shed)
	})
	t.Logf("degraded: %+v", degraded)

	u.setWorkers(8)
	waitUntil(t, 15*time.Second, fmt.Sprintf("the limit back to %d", healthy.Limit), func() (bool, string) {
		st := state()
		return st.Limit >= healthy.Limit, fmt.Sprintf("%+v", st)
	})
	heavy.stop()
	// the heavy requests cut short give their slots back
	waitUntil(t, 10*time.Second, "in flight at most the 4 light clients", func() (bool, string) {
		st := state()
		return st.InFlight <= 4, fmt.Sprintf("%+v", st)
	})
	t.Logf("recovered: %+v", state())

	// the light traffic alone is served: 200 requests in a row, none shed
	before := light.snapshot()
	waitUntil(t, 15*time.Second, "200 light requests answered", func() (bool, string) {
		all, _ := total(diff(light.snapshot(), before), "light", 0)
		return all >= 200, fmt.Sprintf("%d answered", all)
	})
	counts := diff(light.snapshot(), before)
	if all, ok := total(counts, "light", http.StatusOK); ok != all {
		t.Errorf("after recovery, light traffic: answers %v, want every one 200", counts["light"])
	}

	waitUntil(t, 25*time.Second, "the zone logged that it stopped shedding", func() (bool, string) {
		return strings.Contains(caddy.Log.String(), "stopped shedding"), "no such line"
	})
	light.stop()
	log := caddy.Log.String()
	if started, stopped := strings.Count(log, "started shedding"), strings.Count(log, "stopped shedding"); started != 1 || stopped != 1 {
		t.Errorf("log: %d lines started shedding, %d stopped: want one each", started, stopped)
	}
	waitInFlight(t, caddy, "upstream", 0)
}
