package integration_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// queueSite is a site whose adaptive zone upstream has its limit pinned
// at limit, with max_delay and the lines extra, in front of upstream; the
// global `metrics` option lets waitInCaddy see queued requests.
func queueSite(limit int, maxDelay, extra, upstream string) caddyConfig {
	return caddyConfig{Global: "\tmetrics", Site: classMap + fmt.Sprintf(`	rate_limit {
		zone upstream {
			key static
			algorithm adaptive
			events %d
			adaptive {
				min %d
			}
			max_delay %s
%s		}
	}
	reverse_proxy %s`, limit, limit, maxDelay, extra, upstream)}
}

// TestAdaptiveQueueOrder: with max_delay, requests over the limit wait
// for a slot, and each slot freed goes to the best class waiting, FIFO
// within a class: queued bulk, bulk, normal, critical in that order, they
// reach the upstream critical, normal, then the bulk ones in the order
// they came. reserve 0% gives every class the whole limit, so only the
// queue orders them. Each is answered 200 and counted delayed.
func TestAdaptiveQueueOrder(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	caddy := startCaddy(t, queueSite(2, "30s", "\t\t\tpriority {class} critical normal bulk\n\t\t\treserve 0%\n", u.addr()))
	client := newClient(8)
	url := caddy.URL + "/"

	var all []*pending
	for i := range 2 {
		all = append(all, send(t.Context(), client, url, fmt.Sprintf("held-%d", i), "X-Class", "critical"))
		u.waitArrived(t)
	}
	for i, c := range []struct{ tag, class string }{
		{"bulk-0", "bulk"}, {"bulk-1", "bulk"}, {"normal-0", "normal"}, {"critical-0", "critical"},
	} {
		all = append(all, send(t.Context(), client, url, c.tag, "X-Class", c.class))
		waitInCaddy(t, caddy, 3+i) // queued before the next one is sent
	}
	if n := u.held.Load(); n != 2 {
		t.Fatalf("upstream holds %d requests, want 2 (the others wait in the queue)", n)
	}
	for _, want := range []string{"critical-0", "normal-0", "bulk-0", "bulk-1"} {
		u.releaseOne() // one slot freed
		if got := u.waitArrived(t); got != want {
			t.Errorf("a slot freed: %q reached the upstream, want %q (best class first, FIFO within a class)", got, want)
		}
	}
	u.releaseAll()
	for _, p := range all {
		if res := p.wait(t); res.Status != http.StatusOK {
			t.Errorf("%s: status %d, want 200", p.tag, res.Status)
		}
	}
	for _, c := range []struct {
		class, outcome string
		want           int
	}{{"critical", "admitted", 2}, {"critical", "delayed", 1}, {"normal", "delayed", 1}, {"bulk", "delayed", 2}, {"bulk", "shed", 0}} {
		if got := decisions(t, caddy, "upstream", c.class, c.outcome); got != c.want {
			t.Errorf("decisions of class %s, outcome %s: %d, want %d", c.class, c.outcome, got, c.want)
		}
	}
	waitInFlight(t, caddy, "upstream", 0)
}

// TestAdaptiveQueueTimesOut: a request that waits max_delay without a
// slot is shed (503, the shed answer's headers), not before its time is
// up; one that gets a slot while it waits is served.
func TestAdaptiveQueueTimesOut(t *testing.T) {
	withoutRedis(t)
	const maxDelay = 400 * time.Millisecond
	u := startHoldUpstream(t)
	caddy := startCaddy(t, queueSite(1, maxDelay.String(), "", u.addr()))
	client := newClient(4)
	url := caddy.URL + "/"

	held := send(t.Context(), client, url, "held")
	u.waitArrived(t)
	start := time.Now()
	res := get(t, client, url)
	took := time.Since(start)
	checkShedAnswer(t, "a request that waited max_delay", res, "upstream", http.StatusServiceUnavailable, 1, 1)
	if took < maxDelay {
		t.Errorf("shed after %v, want after max_delay (%v): it waits for a slot first", took, maxDelay)
	}

	waiting := send(t.Context(), client, url, "waiting")
	waitInCaddy(t, caddy, 2)
	u.releaseOne()
	if got := u.waitArrived(t); got != "waiting" {
		t.Fatalf("after the slot was freed, %q reached the upstream, want the waiting request", got)
	}
	u.releaseOne()
	for _, p := range []*pending{held, waiting} {
		if res := p.wait(t); res.Status != http.StatusOK {
			t.Errorf("%s: status %d, want 200", p.tag, res.Status)
		}
	}
	for outcome, want := range map[string]int{"admitted": 1, "shed": 1, "delayed": 1} {
		if got := decisions(t, caddy, "upstream", "", outcome); got != want {
			t.Errorf("decisions %s: %d, want %d", outcome, got, want)
		}
	}
	waitInFlight(t, caddy, "upstream", 0)
}

// TestAdaptiveStandingQueue: once the queue has not been empty for
// 100 ms (a standing queue: overload, not a burst), a request that joins
// it waits at most a fraction of the baseline, not max_delay: it is shed
// while the request that has waited since the queue formed still waits
// (for max_delay, 10 s), and that one is served when a slot frees.
func TestAdaptiveStandingQueue(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	caddy := startCaddy(t, queueSite(1, "10s", "", u.addr()))
	client := newClient(4)

	// a baseline: requests the upstream answers at once, one at a time
	waitUntil(t, 15*time.Second, "a baseline learned", func() (bool, string) {
		for range 10 {
			if res := get(t, client, caddy.URL+"/fast"); res.Status != http.StatusOK {
				return false, fmt.Sprintf("/fast: status %d", res.Status)
			}
		}
		st := zoneState(t, caddy, "upstream")
		return st.Baseline > 0, fmt.Sprintf("%+v", st)
	})

	held := send(t.Context(), client, caddy.URL+"/", "held")
	u.waitArrived(t)
	first := send(t.Context(), client, caddy.URL+"/", "first")
	waitInCaddy(t, caddy, 2)
	time.Sleep(300 * time.Millisecond) // the queue has not been empty for more than 100 ms

	res := get(t, client, caddy.URL+"/")
	checkShedAnswer(t, "a request that joined a standing queue", res, "upstream", http.StatusServiceUnavailable, 1, 1)
	if first.finished() {
		t.Fatalf("the first waiting request was answered (%d) before the later one was shed; want it still waiting for its max_delay", first.res.Status)
	}
	u.releaseOne()
	if got := u.waitArrived(t); got != "first" {
		t.Fatalf("after the slot was freed, %q reached the upstream, want the first waiting request", got)
	}
	u.releaseOne()
	for _, p := range []*pending{held, first} {
		if res := p.wait(t); res.Status != http.StatusOK {
			t.Errorf("%s: status %d, want 200", p.tag, res.Status)
		}
	}
}
