package integration_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestAdaptiveOverloadShedsByClass: an upstream of 8 workers, 25 ms
// each, learns its baseline under light traffic; then 40 clients
// (4 critical, 20 normal, 16 bulk) send one request after another, five
// times what it can serve at once. With reserve 50%, bulk may use half
// the limit, normal three quarters (enough normal clients to reach it).
// The limit falls from its start (latency passed tolerance × baseline),
// and the zone sheds by class: bulk most, then normal (the test waits
// until some are), then critical, whose requests are served: in a steady
// window of overload after that, the fraction of each class shed is in
// that order.
func TestAdaptiveOverloadShedsByClass(t *testing.T) {
	withoutRedis(t)
	u := startCapacityUpstream(t, 8, 25*time.Millisecond)
	caddy := startCaddy(t, caddyConfig{Site: classMap + fmt.Sprintf(`	rate_limit {
		zone upstream {
			key static
			algorithm adaptive
			events 64
			adaptive {
				min 8
				initial 32
			}
			priority {class} critical normal bulk
			reserve 50%%
		}
	}
	reverse_proxy %s`, u.addr())})
	client := newClient(32)

	// calm: 4 clients, half the workers, until the baseline is learned
	calm := startClassTraffic(client, caddy.URL+"/", map[string]int{"critical": 4}, 20*time.Millisecond)
	waitBaseline(t, caddy, "upstream")
	calm.stop()
	before := zoneState(t, caddy, "upstream")
	t.Logf("calm: %+v", before)

	tr := startClassTraffic(client, caddy.URL+"/", map[string]int{"critical": 4, "normal": 20, "bulk": 16}, 20*time.Millisecond)
	var lowest adaptiveState
	waitUntil(t, 20*time.Second, "the limit fallen under its start, 300 bulk and 30 normal requests shed", func() (bool, string) {
		st := zoneState(t, caddy, "upstream")
		if lowest.Limit == 0 || st.Limit < lowest.Limit {
			lowest = st
		}
		counts := tr.snapshot()
		_, bulk := total(counts, "bulk", http.StatusServiceUnavailable)
		_, normal := total(counts, "normal", http.StatusServiceUnavailable)
		return lowest.Limit < before.Limit && bulk >= 300 && normal >= 30,
			fmt.Sprintf("%+v, shed: bulk %d, normal %d", st, bulk, normal)
	})
	// then a steady window of overload, which the shares decide
	settled := tr.snapshot()
	time.Sleep(1500 * time.Millisecond)
	tr.stop()
	counts := diff(tr.snapshot(), settled)
	t.Logf("overload: lowest %+v, now %+v; answers until settled %v, then %v (errors %d)",
		lowest, zoneState(t, caddy, "upstream"), settled, counts, tr.errors)

	frac := map[string]float64{}
	for _, class := range []string{"critical", "normal", "bulk"} {
		all, shed := total(counts, class, http.StatusServiceUnavailable)
		_, ok := total(counts, class, http.StatusOK)
		if all != shed+ok {
			t.Errorf("%s: %d answers, %d shed, %d served: want only 200 and 503", class, all, shed, ok)
		}
		if all == 0 {
			t.Fatalf("%s: no answers", class)
		}
		frac[class] = float64(shed) / float64(all)
	}
	if !(frac["bulk"] > frac["normal"] && frac["normal"] > frac["critical"]) {
		t.Errorf("shed fractions: critical %.2f, normal %.2f, bulk %.2f: want bulk > normal > critical",
			frac["critical"], frac["normal"], frac["bulk"])
	}
	if _, ok := total(counts, "critical", http.StatusOK); ok == 0 {
		t.Error("no critical request served under overload")
	}
	if tr.errors > 0 {
		t.Errorf("%d requests failed (no answer)", tr.errors)
	}
	waitInFlight(t, caddy, "upstream", 0)
}

// TestAdaptiveOverloadUnderTheLimit: 16 clients, one request after
// another, on an upstream of 8 workers: twice what it serves at once, so
// the latency is twice the baseline (tolerance 1.5), from a queue at the
// upstream, while the limit (initial 32) is above the 16 in flight. The
// limit must shrink until it binds (under 16: requests are shed) and the
// latency is back within tolerance × baseline.
func TestAdaptiveOverloadUnderTheLimit(t *testing.T) {
	withoutRedis(t)
	u := startCapacityUpstream(t, 8, 25*time.Millisecond)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
		zone upstream {
			key static
			algorithm adaptive
			events 64
			adaptive {
				initial 32
			}
		}
	}
	reverse_proxy %s`, u.addr())})
	client := newClient(20)

	calm := startClassTraffic(client, caddy.URL+"/", map[string]int{"any": 4}, 20*time.Millisecond)
	waitBaseline(t, caddy, "upstream")
	calm.stop()

	tr := startClassTraffic(client, caddy.URL+"/", map[string]int{"any": 16}, 20*time.Millisecond)
	defer tr.stop()
	waitUntil(t, 15*time.Second, "the limit under the 16 in flight, and requests shed", func() (bool, string) {
		st := zoneState(t, caddy, "upstream")
		_, shed := total(tr.snapshot(), "any", http.StatusServiceUnavailable)
		return st.Limit < 16 && shed > 0, fmt.Sprintf("%+v, %d shed", st, shed)
	})
}

// TestAdaptiveUpstream503IsOverload: a 503 from the upstream counts as
// overload, however fast it comes: one request at a time, each answered
// in 20 ms, 200s leave the limit at its start, 503s shrink it.
func TestAdaptiveUpstream503IsOverload(t *testing.T) {
	withoutRedis(t)
	u := startCapacityUpstream(t, 8, 20*time.Millisecond)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
		zone upstream {
			key static
			algorithm adaptive
			events 40
			adaptive {
				min 2
				initial 30
			}
		}
	}
	reverse_proxy %s`, u.addr())})
	client := newClient(1)
	batch := func(status int) {
		t.Helper()
		for range 10 {
			if res := get(t, client, caddy.URL+"/"); res.Status != status {
				t.Fatalf("status %d, want %d", res.Status, status)
			}
		}
	}
	waitUntil(t, 15*time.Second, "a baseline learned", func() (bool, string) {
		batch(http.StatusOK)
		st := zoneState(t, caddy, "upstream")
		return st.Baseline > 0, fmt.Sprintf("%+v", st)
	})
	for range 5 { // a second of 200s: two intervals or more
		batch(http.StatusOK)
	}
	if st := zoneState(t, caddy, "upstream"); st.Limit != 30 {
		t.Fatalf("after 200s: %+v, want the limit at its start, 30", st)
	}
	u.status.Store(http.StatusServiceUnavailable)
	waitUntil(t, 15*time.Second, "the limit under its start of 30", func() (bool, string) {
		batch(http.StatusServiceUnavailable)
		st := zoneState(t, caddy, "upstream")
		return st.Limit < 30, fmt.Sprintf("%+v", st)
	})
}
