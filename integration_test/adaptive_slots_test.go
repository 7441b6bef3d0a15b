package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestAdaptiveClientLeaves: a client that leaves while its request waits
// in the queue is logged 499 and counted client_left, and takes no slot;
// a client that leaves while its request is at the upstream gives its
// slot back. Either way in flight returns to 0 once the rest are done,
// and the zone admits again up to its limit.
func TestAdaptiveClientLeaves(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	cfg := queueSite(1, "30s", "", u.addr())
	cfg.Site = "\tlog\n" + cfg.Site
	caddy := startCaddy(t, cfg)
	client := newClient(4)
	url := caddy.URL + "/"

	// queued, then gone
	held := send(t.Context(), client, url, "held")
	u.waitArrived(t)
	ctx, leave := context.WithCancel(t.Context())
	queued := send(ctx, client, url, "queued")
	waitInCaddy(t, caddy, 2)
	leave()
	<-queued.done
	if queued.err == nil {
		t.Fatalf("queued request: answered %d, want the client gone", queued.res.Status)
	}
	waitUntil(t, 10*time.Second, "the request whose client left logged 499", func() (bool, string) {
		return strings.Contains(caddy.Log.String(), `"status":499`), "not logged"
	})
	waitInCaddy(t, caddy, 1)
	if st := zoneState(t, caddy, "upstream"); st.InFlight != 1 {
		t.Errorf("after the queued client left: %+v, want 1 in flight (the held request's slot)", st)
	}
	if got := decisions(t, caddy, "upstream", "", "client_left"); got != 1 {
		t.Errorf("decisions client_left: %d, want 1", got)
	}
	u.releaseOne()
	if res := held.wait(t); res.Status != http.StatusOK {
		t.Fatalf("held request: status %d, want 200", res.Status)
	}
	waitInFlight(t, caddy, "upstream", 0)

	// at the upstream, then gone
	ctx, leave = context.WithCancel(t.Context())
	upstream := send(ctx, client, url, "at-upstream")
	u.waitArrived(t)
	if st := zoneState(t, caddy, "upstream"); st.InFlight != 1 {
		t.Errorf("a request at the upstream: %+v, want 1 in flight", st)
	}
	leave()
	<-upstream.done
	waitInFlight(t, caddy, "upstream", 0)

	// no slot leaked: the limit of 1 admits the next request
	next := send(t.Context(), client, url, "next")
	if got := u.waitArrived(t); got != "next" {
		t.Fatalf("%q reached the upstream, want the next request", got)
	}
	u.releaseOne()
	if res := next.wait(t); res.Status != http.StatusOK {
		t.Errorf("next request: status %d, want 200", res.Status)
	}
	waitInFlight(t, caddy, "upstream", 0)
}

// TestAdaptiveBesideStoreZone: an adaptive zone decides before the zones
// on Redis. A request it sheds never reaches Redis (no script call, no
// key); a request it admits that the Redis zone denies (429) gives its
// slot back, so the limit of 1 admits the next request.
func TestAdaptiveBesideStoreZone(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	u := startHoldUpstream(t)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
%s		zone upstream {
			key static
			algorithm adaptive
			events 1
		}
		zone tenant {
			key {http.request.header.X-Key}
			algorithm fixed_window
			events 1
			window 1h
			quota_lease off
		}
	}
	reverse_proxy %s`, exactRedis(srv), u.addr())})
	client := newClient(4)
	url := caddy.URL + "/"
	keys := func() int64 {
		n, err := limitKeys(t.Context(), rdb)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	held := send(t.Context(), client, url, "held", "X-Key", "a")
	u.waitArrived(t)
	keys0, calls0 := keys(), redistest.ScriptCalls(t, rdb)
	for i := range 5 {
		res := get(t, client, url, "X-Key", fmt.Sprintf("shed-%d", i))
		checkShedAnswer(t, "over the adaptive limit", res, "upstream", http.StatusServiceUnavailable, 1, 1)
	}
	if k, c := keys()-keys0, redistest.ScriptCalls(t, rdb)-calls0; k != 0 || c != 0 {
		t.Errorf("5 requests shed: %d keys and %d script calls in Redis, want none (a shed request never reaches Redis)", k, c)
	}
	u.releaseOne()
	if res := held.wait(t); res.Status != http.StatusOK {
		t.Fatalf("held request: status %d, want 200", res.Status)
	}
	waitInFlight(t, caddy, "upstream", 0)

	// key a has used its quota: the adaptive zone admits, tenant denies
	for range 3 {
		if res := get(t, client, url, "X-Key", "a"); res.Status != http.StatusTooManyRequests {
			t.Fatalf("key a again: status %d, want 429 from zone tenant", res.Status)
		}
		if st := zoneState(t, caddy, "upstream"); st.InFlight != 0 {
			t.Fatalf("after a request zone tenant denied: %+v, want 0 in flight (its slot given back)", st)
		}
	}
	next := send(t.Context(), client, url, "next", "X-Key", "b")
	if got := u.waitArrived(t); got != "next" {
		t.Fatalf("%q reached the upstream, want the next request", got)
	}
	u.releaseOne()
	if res := next.wait(t); res.Status != http.StatusOK {
		t.Errorf("next request: status %d, want 200 (no slot kept by the denied ones)", res.Status)
	}
}

// TestAdaptiveBesideQuotaLease: an adaptive zone does not keep a
// request's other zones from being decided from quota leases: a hot key
// well under its limit comes to be leased (lease units used), and then
// most of its requests are decided without a script call (with leases
// off each is at least one), while the adaptive zone admits every one.
func TestAdaptiveBesideQuotaLease(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	caddy := startCaddy(t, caddyConfig{Global: "\tmetrics", Site: fmt.Sprintf(`	rate_limit {
%s		zone upstream {
			key static
			algorithm adaptive
			events 50
		}
		zone tenant {
			key static
			algorithm fixed_window
			events 1000000
			window 1m
		}
	}
	respond "ok" 200`, exactRedis(srv))})
	client := newClient(1)
	sent := 0
	batch := func(n int) {
		t.Helper()
		for range n {
			sent++
			if res := get(t, client, caddy.URL+"/"); res.Status != http.StatusOK {
				t.Fatalf("request %d: status %d, want 200", sent, res.Status)
			}
		}
	}
	waitUntil(t, 15*time.Second, "the hot key leased", func() (bool, string) {
		batch(100)
		units := leaseUnits(t, caddy, "tenant")
		return units.used > 0, units.String()
	})
	const n = 200
	calls0 := redistest.ScriptCalls(t, rdb)
	batch(n)
	calls := redistest.ScriptCalls(t, rdb) - calls0
	t.Logf("%d requests once leased: %d script calls; lease units %v", n, calls, leaseUnits(t, caddy, "tenant"))
	if calls >= n/2 {
		t.Errorf("%d requests once leased: %d script calls, want under %d (most decided from leases)", n, calls, n/2)
	}
	if got := decisions(t, caddy, "upstream", "", "admitted"); got != sent {
		t.Errorf("adaptive decisions admitted: %d, want %d", got, sent)
	}
}

// TestAdaptiveSlotHeldUntilHeader: a request holds its slot until the
// first response header, not until its body ends: with a limit of 1, a
// response whose header came and whose body is still held leaves nothing
// in flight, and the next request is served meanwhile.
func TestAdaptiveSlotHeldUntilHeader(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
		zone upstream {
			key static
			algorithm adaptive
			events 1
		}
	}
	reverse_proxy %s {
		flush_interval -1
	}`, u.addr())})
	client := newClient(4)

	waiting := send(t.Context(), client, caddy.URL+"/", "before-header")
	u.waitArrived(t)
	if res := get(t, client, caddy.URL+"/fast"); res.Status != http.StatusServiceUnavailable {
		t.Fatalf("while a request waits for its header: /fast got %d, want 503 (its slot is held)", res.Status)
	}
	u.releaseOne()
	waiting.wait(t)

	streaming := send(t.Context(), client, caddy.URL+"/stream", "stream")
	u.waitArrived(t) // its header sent, its body held
	waitInFlight(t, caddy, "upstream", 0)
	if res := get(t, client, caddy.URL+"/fast"); res.Status != http.StatusOK {
		t.Errorf("while a response streams its body: /fast got %d, want 200 (the slot went back at the header)", res.Status)
	}
	if streaming.finished() {
		t.Fatalf("the streamed response ended before its body was let go")
	}
	u.releaseOne()
	if res := streaming.wait(t); res.Status != http.StatusOK || res.Body != "header sent, released stream" {
		t.Errorf("streamed response: %d %q, want 200 and its whole body", res.Status, res.Body)
	}
}
