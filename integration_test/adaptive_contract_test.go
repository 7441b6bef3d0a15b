package integration_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// Acceptance tests of `algorithm adaptive` written from what it promises
// (docs/load-shedding.md, docs/configuration.md), black-box:
// a real Caddy, real upstreams on loopback, the admin API and /metrics.

// startsAt30 is an adaptive block whose limit starts at 30, floor 2: the
// cases that check a limit is left alone read "still 30".
const startsAt30 = "\t\t\tadaptive {\n\t\t\t\tmin 2\n\t\t\t\tinitial 30\n\t\t\t}\n"

// learnBaseline calls serve five times a round until zone "up" of caddy
// has a baseline of at least 15 ms (a 20 ms upstream's), and returns it;
// a round whose serve fails starts over.
func learnBaseline(t *testing.T, caddy *caddyProc, serve func() error) float64 {
	t.Helper()
	waitUntil(t, 15*time.Second, "a baseline learned at 20 ms", func() (bool, string) {
		for range 5 {
			if err := serve(); err != nil {
				return false, err.Error()
			}
		}
		st := zoneState(t, caddy, "up")
		return st.Baseline >= 0.015, fmt.Sprintf("%+v", st)
	})
	return zoneState(t, caddy, "up").Baseline
}

// sendFor sends one request after another to url for d, failing the
// test at the first whose status is not want.
func sendFor(t *testing.T, d time.Duration, client *http.Client, url string, want int, what string, headers ...string) {
	t.Helper()
	for start := time.Now(); time.Since(start) < d; {
		if res := get(t, client, url, headers...); res.Status != want {
			t.Fatalf("%s: %d, want %d", what, res.Status, want)
		}
	}
}

// contractZone is an adaptive zone block named name, key static, with
// events and the lines extra (each already indented and ended).
func contractZone(name string, events int, extra string) string {
	return fmt.Sprintf(`		zone %s {
			key static
			algorithm adaptive
			events %d
%s		}
`, name, events, extra)
}

// pinned is an adaptive block that pins the limit at n (min = events).
func pinned(n int) string { return fmt.Sprintf("\t\t\tadaptive {\n\t\t\t\tmin %d\n\t\t\t}\n", n) }

// memberOf is the member of ms named name.
func memberOf(t *testing.T, ms []sfMember, name string) sfMember {
	t.Helper()
	for _, m := range ms {
		if m.Name == name {
			return m
		}
	}
	t.Errorf("no member %q in %v", name, memberNames(ms))
	return sfMember{Params: map[string]any{}}
}

// holdAt sends a request to url with X-Tag tag and the headers, and
// waits until it is held at u (it must be the one that arrives).
func holdAt(t *testing.T, u *holdUpstream, client *http.Client, url, tag string, headers ...string) *pending {
	t.Helper()
	p := send(t.Context(), client, url, tag, headers...)
	if got := u.waitArrived(t); got != tag {
		t.Fatalf("upstream got %q, want %q", got, tag)
	}
	return p
}

type problemBody struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
}

// TestContractAdaptiveHandlerStatusNotApplied: the handler's `status`
// (429 here) does not apply to a shed answer, which is 503 (the zone sets
// none); it still applies to the other zones' rejections. With
// problem_details, the shed body is application/problem+json of the type
// docs/load-shedding.md names (…/load-shedding.md#overloaded), status
// 503, while a quota rejection's type is quota-exceeded.
func TestContractAdaptiveHandlerStatusNotApplied(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
		status 429
		problem_details
%s		zone quota {
			key {http.request.header.X-Key}
			events 1
			window 1h
		}
	}
	reverse_proxy %s`, contractZone("up", 1, pinned(1)), u.addr())})
	client := newClient(4)
	url := caddy.URL + "/"

	held := holdAt(t, u, client, url, "held", "X-Key", "h")
	res := get(t, client, url, "X-Key", "other")
	checkShedAnswer(t, "shed with the handler's status 429", res, "up", http.StatusServiceUnavailable, 1, 1)
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("shed answer: Content-Type %q, want application/problem+json", ct)
	}
	var p problemBody
	if err := json.Unmarshal([]byte(res.Body), &p); err != nil || p.Status != http.StatusServiceUnavailable ||
		!strings.HasSuffix(p.Type, "load-shedding.md#overloaded") || strings.Contains(p.Type, "quota-exceeded") {
		t.Errorf("shed answer's body %q (%v): want a problem of status 503, type …/load-shedding.md#overloaded", res.Body, err)
	}

	u.releaseAll()
	if res := held.wait(t); res.Status != http.StatusOK {
		t.Fatalf("held request: status %d, want 200", res.Status)
	}
	waitInFlight(t, caddy, "up", 0)
	if got := get(t, client, caddy.URL+"/fast", "X-Key", "k").Status; got != http.StatusOK {
		t.Fatalf("first request of key k: %d, want 200", got)
	}
	res = get(t, client, caddy.URL+"/fast", "X-Key", "k")
	if res.Status != http.StatusTooManyRequests {
		t.Errorf("second request of key k (quota denies): %d, want the handler's 429", res.Status)
	}
	p = problemBody{}
	if err := json.Unmarshal([]byte(res.Body), &p); err != nil || !strings.Contains(p.Type, "quota-exceeded") || p.Status != 429 {
		t.Errorf("quota rejection's body %q (%v): want a quota-exceeded problem of status 429", res.Body, err)
	}
}

// TestContractAdaptiveShedSparesOtherZones: the adaptive slot is taken
// before the other zones decide, whatever the zones' names: a shed request
// is not counted by another zone (here aa, 4 per hour on the embedded
// store, decided after zz though its name sorts first), and a request aa
// denies (429, not 503) gives its adaptive slot back: with a limit of 2,
// five such denials in a row are each aa's 429, and nothing stays in
// flight.
func TestContractAdaptiveShedSparesOtherZones(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
		zone aa {
			key static
			events 4
			window 1h
		}
%s	}
	reverse_proxy %s`, contractZone("zz", 2, pinned(2)), u.addr())})
	client := newClient(8)
	url := caddy.URL + "/"

	a := holdAt(t, u, client, url, "a")
	b := holdAt(t, u, client, url, "b")
	for i := range 5 {
		res := get(t, client, url)
		checkShedAnswer(t, fmt.Sprintf("shed request %d", i), res, "zz", http.StatusServiceUnavailable, 2, 2)
	}
	u.releaseAll()
	for _, p := range []*pending{a, b} {
		if res := p.wait(t); res.Status != http.StatusOK {
			t.Fatalf("%s: status %d, want 200", p.tag, res.Status)
		}
	}
	waitInFlight(t, caddy, "zz", 0)
	// aa counted only the two admitted requests: two more fit
	for i := range 2 {
		if got := get(t, client, caddy.URL+"/fast").Status; got != http.StatusOK {
			t.Fatalf("request %d after the sheds: %d, want 200 (aa has counted 2 of 4: a shed request is not counted)", i, got)
		}
	}
	for i := range 5 {
		res := get(t, client, caddy.URL+"/fast")
		if res.Status != http.StatusTooManyRequests {
			t.Fatalf("request %d over aa's 4: %d, want aa's 429 (a denied request gives its adaptive slot back)", i, res.Status)
		}
		if m := memberOf(t, sfMembers(t, res.Header.Values("RateLimit")), "aa"); m.Params["r"] != int64(0) {
			t.Errorf("aa's rejection: RateLimit %q, want aa's r=0", res.Header.Values("RateLimit"))
		}
	}
	waitInFlight(t, caddy, "zz", 0)
}

// TestContractAdaptiveClassShareFloor: class i of n may use
// floor(limit × (1 − reserve × i/(n−1))): with the limit pinned at 7 and
// reserve 20%, bulk 5 (5.6), normal 6 (6.3), critical 7. A value no class
// lists is the last class, and is counted under that class's name in
// caddy_rate_limit_adaptive_decisions_total (class names are
// configuration, so bounded). The admitted request that took the last
// slot of its share carries r=0 and t=1.
func TestContractAdaptiveClassShareFloor(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	caddy := startCaddy(t, caddyConfig{Global: "\tmetrics", Site: classMap + fmt.Sprintf(`	rate_limit {
%s	}
	reverse_proxy %s`, contractZone("up", 7, pinned(7)+"\t\t\tpriority {class} critical normal bulk\n\t\t\treserve 20%\n"), u.addr())})
	client := newClient(16)
	url := caddy.URL + "/"
	shed := func(value string, q int64) {
		t.Helper()
		res := get(t, client, url, "X-Class", value, "X-Tag", "shed-"+value)
		checkShedAnswer(t, value+" over its share", res, "up", http.StatusServiceUnavailable, q, q)
	}

	var bulk []*pending
	for i := range 5 {
		bulk = append(bulk, holdAt(t, u, client, url, fmt.Sprintf("bulk-%d", i), "X-Class", "bulk"))
	}
	shed("bulk", 5)
	shed("mystery", 5) // not listed: the last class, bulk
	normal := holdAt(t, u, client, url, "normal-0", "X-Class", "normal")
	shed("normal", 6)
	critical := holdAt(t, u, client, url, "critical-0", "X-Class", "critical")
	shed("critical", 7)
	if st := zoneState(t, caddy, "up"); st.Limit != 7 || st.InFlight != 7 {
		t.Errorf("admin API: %+v, want limit 7, 7 in flight", st)
	}

	u.releaseAll()
	for _, p := range append(bulk, normal, critical) {
		if res := p.wait(t); res.Status != http.StatusOK {
			t.Errorf("%s: status %d, want 200", p.tag, res.Status)
		}
	}
	last := bulk[4].res // took slot 5 of bulk's 5
	state := memberOf(t, sfMembers(t, last.Header.Values("RateLimit")), "up")
	policy := memberOf(t, sfMembers(t, last.Header.Values("RateLimit-Policy")), "up")
	if state.Params["r"] != int64(0) || state.Params["t"] != int64(1) || policy.Params["q"] != int64(5) {
		t.Errorf("bulk request that took the last slot of its share: RateLimit %q, RateLimit-Policy %q: want r=0, t=1, q=5",
			last.Header.Values("RateLimit"), last.Header.Values("RateLimit-Policy"))
	}
	for _, c := range []struct {
		class, outcome string
		want           int
	}{{"bulk", "shed", 2}, {"normal", "shed", 1}, {"critical", "shed", 1},
		{"bulk", "admitted", 5}, {"normal", "admitted", 1}, {"critical", "admitted", 1}} {
		if got := decisions(t, caddy, "up", c.class, c.outcome); got != c.want {
			t.Errorf("decisions of class %s, outcome %s: %d, want %d", c.class, c.outcome, got, c.want)
		}
	}
	_, metrics := adminDo(t, http.MethodGet, caddy.AdminURL+"/metrics", "", nil)
	for _, label := range []string{`class="other"`, `class="mystery"`} {
		if strings.Contains(metrics, label) {
			t.Errorf("/metrics has a series with %s: a value no class lists must count as the last class", label)
		}
	}
	waitInFlight(t, caddy, "up", 0)
}

// TestContractAdaptiveTwoClassesAndOne: with two classes, the second uses
// floor(limit × (1 − reserve)): limit 6 and reserve 50% give bulk 3 and
// critical 6. With one class, reserve does not apply: every request (also
// one of a value not listed) may use the whole limit.
func TestContractAdaptiveTwoClassesAndOne(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	caddy := startCaddy(t, caddyConfig{Site: classMap + fmt.Sprintf(`	handle /two* {
		rate_limit {
%s		}
		reverse_proxy %s
	}
	handle /one* {
		rate_limit {
%s		}
		reverse_proxy %s
	}`,
		contractZone("two", 6, pinned(6)+"\t\t\tpriority {class} critical bulk\n\t\t\treserve 50%\n"), u.addr(),
		contractZone("one", 3, pinned(3)+"\t\t\tpriority {class} critical\n\t\t\treserve 50%\n"), u.addr())})
	client := newClient(16)

	t.Run("one class", func(t *testing.T) {
		url := caddy.URL + "/one"
		for i := range 3 {
			holdAt(t, u, client, url, fmt.Sprintf("one-%d", i), "X-Class", "bulk") // not listed: the one class
		}
		checkShedAnswer(t, "4th request", get(t, client, url, "X-Class", "critical"), "one", http.StatusServiceUnavailable, 3, 3)
		checkShedAnswer(t, "4th request, unlisted", get(t, client, url, "X-Class", "bulk"), "one", http.StatusServiceUnavailable, 3, 3)
	})
	t.Run("two classes", func(t *testing.T) {
		url := caddy.URL + "/two"
		for i := range 3 {
			holdAt(t, u, client, url, fmt.Sprintf("two-bulk-%d", i), "X-Class", "bulk")
		}
		checkShedAnswer(t, "bulk at 3", get(t, client, url, "X-Class", "bulk"), "two", http.StatusServiceUnavailable, 3, 3)
		checkShedAnswer(t, "unlisted at 3", get(t, client, url, "X-Class", "normal"), "two", http.StatusServiceUnavailable, 3, 3)
		for i := range 3 {
			holdAt(t, u, client, url, fmt.Sprintf("two-critical-%d", i), "X-Class", "critical")
		}
		checkShedAnswer(t, "critical at 6", get(t, client, url, "X-Class", "critical"), "two", http.StatusServiceUnavailable, 6, 6)
	})
}

// TestContractAdaptiveQueueBetterClassPasses: with max_delay, a request
// over its class's share waits, but does not hold back a better class
// whose share has room: with the limit at 10 and reserve 20%, a bulk
// request waits at 8 in flight while a critical one is admitted at once;
// the waiting bulk request gets a slot only when in flight falls under
// bulk's share of 8, and is then served and counted delayed.
func TestContractAdaptiveQueueBetterClassPasses(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	caddy := startCaddy(t, queueSite(10, "30s", "\t\t\tpriority {class} critical normal bulk\n\t\t\treserve 20%\n", u.addr()))
	client := newClient(16)
	url := caddy.URL + "/"

	var all []*pending
	for i := range 8 {
		all = append(all, holdAt(t, u, client, url, fmt.Sprintf("bulk-%d", i), "X-Class", "bulk"))
	}
	queued := send(t.Context(), client, url, "bulk-queued", "X-Class", "bulk")
	waitInCaddy(t, caddy, 9)
	critical := holdAt(t, u, client, url, "critical", "X-Class", "critical") // 9 in flight
	if queued.finished() {
		t.Fatalf("queued bulk request answered %d before a slot of its share freed", queued.res.Status)
	}

	u.releaseOne() // 8 in flight: still bulk's whole share
	waitInFlight(t, caddy, "upstream", 8)
	select {
	case tag := <-u.arrived:
		t.Fatalf("%q reached the upstream with 8 in flight: bulk's share is 8", tag)
	case <-time.After(300 * time.Millisecond):
	}
	u.releaseOne() // 7 in flight: room in bulk's share
	if got := u.waitArrived(t); got != "bulk-queued" {
		t.Fatalf("%q reached the upstream, want the queued bulk request", got)
	}
	u.releaseAll()
	for _, p := range append(all, critical, queued) {
		if res := p.wait(t); res.Status != http.StatusOK {
			t.Errorf("%s: status %d, want 200", p.tag, res.Status)
		}
	}
	if got := decisions(t, caddy, "upstream", "bulk", "delayed"); got != 1 {
		t.Errorf("decisions of bulk, delayed: %d, want 1", got)
	}
	if got := decisions(t, caddy, "upstream", "critical", "admitted"); got != 1 {
		t.Errorf("decisions of critical, admitted: %d, want 1", got)
	}
	waitInFlight(t, caddy, "upstream", 0)
}

// TestContractAdaptiveDefaults: before any request, a zone's limit is its
// initial, in the admin API and in the limit gauge: min defaults to
// min(4, events) and initial to clamp(20, min, events).
func TestContractAdaptiveDefaults(t *testing.T) {
	withoutRedis(t)
	cases := []struct {
		zone    string
		events  int
		block   string
		initial int
	}{
		{"ev10", 10, "", 10},
		{"ev100", 100, "", 20},
		{"ev3", 3, "", 3},
		{"ev1", 1, "", 1},
		{"min30", 100, "\t\t\tadaptive {\n\t\t\t\tmin 30\n\t\t\t}\n", 30},
		{"init7", 100, "\t\t\tadaptive {\n\t\t\t\tinitial 7\n\t\t\t}\n", 7},
		{"init4", 100, "\t\t\tadaptive {\n\t\t\t\tinitial 4\n\t\t\t}\n", 4}, // = the default min
	}
	var site strings.Builder
	for _, c := range cases {
		fmt.Fprintf(&site, "\thandle /%s {\n\t\trate_limit {\n%s\t\t}\n\t\trespond \"ok\"\n\t}\n", c.zone, contractZone(c.zone, c.events, c.block))
	}
	caddy := startCaddy(t, caddyConfig{Global: "\tmetrics", Site: site.String()})
	for _, c := range cases {
		st := zoneState(t, caddy, c.zone)
		if st.Limit != c.initial || st.InFlight != 0 {
			t.Errorf("zone %s (events %d): admin API %+v, want limit %d (its initial), 0 in flight", c.zone, c.events, st, c.initial)
		}
		if got := metricValue(t, caddy, fmt.Sprintf(`caddy_rate_limit_adaptive_limit{zone=%q}`, c.zone)); got != float64(c.initial) {
			t.Errorf("zone %s: caddy_rate_limit_adaptive_limit %v, want %d (its initial, before any request)", c.zone, got, c.initial)
		}
	}
}

// TestContractAdaptiveNoGrowthWithoutLoad: the limit grows only in an
// interval where in flight reached half the limit: one request at a time
// for 3 s (six intervals or more, 20 samples or more each, from an
// upstream that answers in 10 ms) teaches a baseline but never takes the
// limit over its initial 10.
func TestContractAdaptiveNoGrowthWithoutLoad(t *testing.T) {
	withoutRedis(t)
	u := startCapacityUpstream(t, 8, 10*time.Millisecond)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
%s	}
	reverse_proxy %s`, contractZone("up", 100, "\t\t\tadaptive {\n\t\t\t\tinitial 10\n\t\t\t}\n"), u.addr())})
	client := newClient(1)
	n := 0
	for start := time.Now(); time.Since(start) < 3*time.Second; {
		for range 10 {
			n++
			if res := get(t, client, caddy.URL+"/"); res.Status != http.StatusOK {
				t.Fatalf("request %d: status %d, want 200", n, res.Status)
			}
		}
		if st := zoneState(t, caddy, "up"); st.Limit > 10 {
			t.Fatalf("after %d requests one at a time: %+v, want the limit at most its initial 10 (in flight never reached 5)", n, st)
		}
	}
	st := zoneState(t, caddy, "up")
	if st.Baseline <= 0 {
		t.Errorf("after %d requests: %+v, want a baseline learned", n, st)
	}
	t.Logf("after %d requests one at a time: %+v", n, st)
}

// TestContractAdaptiveFloorUnder504: a 504 from the next handler counts
// as overload: once a baseline is learned, fast 504s shrink the limit
// from its start of 30 down to min (3), and never under it.
func TestContractAdaptiveFloorUnder504(t *testing.T) {
	withoutRedis(t)
	u := startCapacityUpstream(t, 8, 10*time.Millisecond)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
%s	}
	reverse_proxy %s`, contractZone("up", 40, "\t\t\tadaptive {\n\t\t\t\tmin 3\n\t\t\t\tinitial 30\n\t\t\t}\n"), u.addr())})
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
		st := zoneState(t, caddy, "up")
		return st.Baseline > 0, fmt.Sprintf("%+v", st)
	})
	u.status.Store(http.StatusGatewayTimeout)
	from := time.Now()
	waitUntil(t, 20*time.Second, "the limit down to min 3 under 504s", func() (bool, string) {
		batch(http.StatusGatewayTimeout)
		st := zoneState(t, caddy, "up")
		if st.Limit < 3 {
			t.Fatalf("limit %d under min 3: %+v", st.Limit, st)
		}
		return st.Limit == 3, fmt.Sprintf("%+v", st)
	})
	t.Logf("limit from 30 to min 3 in %v of 504s", time.Since(from).Round(time.Millisecond))
	for start := time.Now(); time.Since(start) < 1500*time.Millisecond; {
		batch(http.StatusGatewayTimeout)
		if st := zoneState(t, caddy, "up"); st.Limit != 3 {
			t.Fatalf("under 504s at min: %+v, want the limit to stay at min 3", st)
		}
	}
}

// TestContractAdaptiveCeiling: under load an upstream serves without
// slowing (200 workers, 20 ms each), the limit grows from its initial 4
// to events (12), and never over it.
func TestContractAdaptiveCeiling(t *testing.T) {
	withoutRedis(t)
	u := startCapacityUpstream(t, 200, 20*time.Millisecond)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
%s	}
	reverse_proxy %s`, contractZone("up", 12, "\t\t\tadaptive {\n\t\t\t\tmin 2\n\t\t\t\tinitial 4\n\t\t\t}\n"), u.addr())})
	client := newClient(32)
	waitUntil(t, 15*time.Second, "a baseline learned under light traffic", func() (bool, string) {
		for range 5 {
			get(t, client, caddy.URL+"/")
		}
		st := zoneState(t, caddy, "up")
		return st.Baseline > 0, fmt.Sprintf("%+v", st)
	})
	tr := startClassTraffic(client, caddy.URL+"/", map[string]int{"x": 16}, 5*time.Millisecond)
	defer tr.stop()
	waitUntil(t, 20*time.Second, "the limit grown to events (12)", func() (bool, string) {
		st := zoneState(t, caddy, "up")
		if st.Limit > 12 || st.InFlight > 12 {
			t.Fatalf("over events 12: %+v", st)
		}
		return st.Limit == 12, fmt.Sprintf("%+v", st)
	})
	for start := time.Now(); time.Since(start) < time.Second; time.Sleep(20 * time.Millisecond) {
		if st := zoneState(t, caddy, "up"); st.Limit > 12 || st.InFlight > 12 {
			t.Fatalf("over events 12: %+v", st)
		}
	}
}

// TestContractAdaptiveSlotReleasedOnUpstreamError: the slot is given back
// whatever happens: with a limit of 1, requests to an upstream that does
// not listen, or that drops the connection, each get reverse_proxy's 502
// (never a shed 503), and nothing stays in flight.
func TestContractAdaptiveSlotReleasedOnUpstreamError(t *testing.T) {
	withoutRedis(t)
	dead := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	drop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(drop.Close)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	handle /dead {
		rate_limit {
%s		}
		reverse_proxy %s
	}
	handle /drop {
		rate_limit {
%s		}
		reverse_proxy %s
	}`, contractZone("dead", 1, pinned(1)), dead, contractZone("drop", 1, pinned(1)), strings.TrimPrefix(drop.URL, "http://"))})
	client := newClient(2)
	for _, zone := range []string{"dead", "drop"} {
		for i := range 5 {
			if got := get(t, client, caddy.URL+"/"+zone).Status; got != http.StatusBadGateway {
				t.Fatalf("/%s request %d: status %d, want 502 (a slot not given back would shed: 503)", zone, i, got)
			}
		}
		waitInFlight(t, caddy, zone, 0)
	}
}

// TestContractAdaptiveDryRunNeverWaits: a dry_run zone with max_delay
// queues nothing: over its pinned limit of 1, a second request reaches
// the upstream at once (not after 30 s), counted dry_run_shed, and both
// are served.
func TestContractAdaptiveDryRunNeverWaits(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	caddy := startCaddy(t, caddyConfig{Global: "\tmetrics", Site: fmt.Sprintf(`	rate_limit {
%s	}
	reverse_proxy %s`, contractZone("up", 1, pinned(1)+"\t\t\tmax_delay 30s\n\t\t\tdry_run\n"), u.addr())})
	client := newClient(4)
	first := holdAt(t, u, client, caddy.URL+"/", "first")
	second := holdAt(t, u, client, caddy.URL+"/", "second") // fails after 10 s if it waits
	u.releaseAll()
	for _, p := range []*pending{first, second} {
		if res := p.wait(t); res.Status != http.StatusOK {
			t.Errorf("%s: status %d, want 200", p.tag, res.Status)
		}
	}
	if got := decisions(t, caddy, "up", "", "dry_run_shed"); got != 1 {
		t.Errorf("decisions dry_run_shed: %d, want 1", got)
	}
	if got := decisions(t, caddy, "up", "", "delayed"); got != 0 {
		t.Errorf("decisions delayed: %d, want 0 (dry_run: nothing waits)", got)
	}
}

// TestContractAdaptiveSharedAcrossHandlers: zone names are global, so two
// handlers that declare the same adaptive zone share its limiter: with a
// limit of 1, a request held under /a makes one under /b shed.
func TestContractAdaptiveSharedAcrossHandlers(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	zone := contractZone("up", 1, pinned(1))
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	handle /a {
		rate_limit {
%s		}
		reverse_proxy %s
	}
	handle /b {
		rate_limit {
%s		}
		reverse_proxy %s
	}`, zone, u.addr(), zone, u.addr())})
	client := newClient(4)
	held := holdAt(t, u, client, caddy.URL+"/a", "a")
	checkShedAnswer(t, "/b while /a holds the zone's slot", get(t, client, caddy.URL+"/b"), "up", http.StatusServiceUnavailable, 1, 1)
	u.releaseAll()
	held.wait(t)
	waitInFlight(t, caddy, "up", 0)
	if got := get(t, client, caddy.URL+"/b").Status; got != http.StatusOK {
		t.Errorf("/b once /a is done: %d, want 200", got)
	}
}

// TestContractAdaptivePerKeyLimiters: one limiter per key value: with a
// limit of 1, key a's held request does not shed key b's, but sheds a
// second of key a; the gauges are summed over the key values (limit 2, 2
// in flight); and a zone keeps at most 100 limiters, so after 150 keys
// its summed limit is at most 100.
func TestContractAdaptivePerKeyLimiters(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	caddy := startCaddy(t, caddyConfig{Global: "\tmetrics", Site: fmt.Sprintf(`	rate_limit {
		zone up {
			key {http.request.header.X-Key}
			algorithm adaptive
			events 1
		}
	}
	reverse_proxy %s`, u.addr())})
	client := newClient(8)
	url := caddy.URL + "/"
	a := holdAt(t, u, client, url, "a", "X-Key", "a")
	b := holdAt(t, u, client, url, "b", "X-Key", "b")
	checkShedAnswer(t, "a second request of key a", get(t, client, url, "X-Key", "a"), "up", http.StatusServiceUnavailable, 1, 1)
	for series, want := range map[string]float64{
		`caddy_rate_limit_adaptive_limit{zone="up"}`:     2,
		`caddy_rate_limit_adaptive_in_flight{zone="up"}`: 2,
	} {
		if got := metricValue(t, caddy, series); got != want {
			t.Errorf("%s with keys a and b held: %v, want %v (summed over key values)", series, got, want)
		}
	}
	u.releaseAll()
	a.wait(t)
	b.wait(t)
	for i := range 150 {
		if got := get(t, client, caddy.URL+"/fast", "X-Key", fmt.Sprintf("k%d", i)).Status; got != http.StatusOK {
			t.Fatalf("key k%d: status %d, want 200", i, got)
		}
	}
	if got := metricValue(t, caddy, `caddy_rate_limit_adaptive_limit{zone="up"}`); got < 1 || got > 100 {
		t.Errorf("caddy_rate_limit_adaptive_limit after 152 key values of limit 1: %v, want at most 100 (at most 100 limiters per zone)", got)
	}
}

// TestContractAdaptiveReloadStatusAndRename: a reload that changes only
// the zone's status and max_delay keeps its limiter (the held request's
// slot still counts: the next is shed, now with the new status); a reload
// that renames the zone starts a new limiter (the next request is
// admitted), and the old request's end does not count in it.
func TestContractAdaptiveReloadStatusAndRename(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	cfg := func(name, extra string) caddyConfig {
		return caddyConfig{Site: fmt.Sprintf(`	rate_limit {
%s	}
	reverse_proxy %s`, contractZone(name, 1, pinned(1)+extra), u.addr())}
	}
	caddy := startCaddy(t, cfg("up", ""))
	client := newClient(4)
	url := caddy.URL + "/"
	held := holdAt(t, u, client, url, "held")

	loadCaddyfile(t, caddy, reloadCaddyfile(t, caddy, cfg("up", "\t\t\tstatus 429\n\t\t\tmax_delay 50ms\n")))
	checkShedAnswer(t, "after a reload that set status 429", get(t, client, url), "up", http.StatusTooManyRequests, 1, 1)
	if st := zoneState(t, caddy, "up"); st.InFlight != 1 {
		t.Errorf("after the reload: %+v, want the held request's slot kept (1 in flight)", st)
	}

	loadCaddyfile(t, caddy, reloadCaddyfile(t, caddy, cfg("renamed", "")))
	next := holdAt(t, u, client, url, "next") // a new limiter: room for one
	if st := zoneState(t, caddy, "renamed"); st.InFlight != 1 || st.Limit != 1 {
		t.Errorf("renamed zone: %+v, want limit 1, 1 in flight", st)
	}
	u.releaseAll()
	held.wait(t)
	next.wait(t)
	waitInFlight(t, caddy, "renamed", 0)
	if got := get(t, client, url).Status; got != http.StatusOK {
		t.Errorf("renamed zone once both are done: %d, want 200", got)
	}
}

// caddyAdapt runs `caddy adapt` on a Caddyfile with site (as
// caddyValidate writes it) and returns its standard output.
func caddyAdapt(t *testing.T, site string) (string, string, error) {
	t.Helper()
	dir := t.TempDir()
	caddyfile := "{\n\tadmin off\n\tauto_https off\n}\n\nhttp://127.0.0.1:1 {\n" + site + "}\n"
	if err := os.WriteFile(filepath.Join(dir, "Caddyfile"), []byte(caddyfile), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(caddyBin, "adapt", "--config", "Caddyfile", "--adapter", "caddyfile")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	return string(out), stderr.String(), err
}

// findZone finds, anywhere in v, an object with "algorithm": "adaptive".
func findAdaptive(v any) map[string]any {
	switch x := v.(type) {
	case map[string]any:
		if x["algorithm"] == "adaptive" {
			return x
		}
		for _, e := range x {
			if z := findAdaptive(e); z != nil {
				return z
			}
		}
	case []any:
		for _, e := range x {
			if z := findAdaptive(e); z != nil {
				return z
			}
		}
	}
	return nil
}

// TestContractAdaptiveJSON: `caddy adapt` writes an adaptive zone as the
// contract's JSON: "adaptive":{"min","initial","tolerance"}, "priority"
// (the placeholder), "priority_classes", "reserve" (a fraction),
// "status".
func TestContractAdaptiveJSON(t *testing.T) {
	withoutRedis(t)
	out, stderr, err := caddyAdapt(t, `	rate_limit {
		zone up {
			key static
			algorithm adaptive
			events 50
			adaptive {
				min 2
				initial 5
				tolerance 1.25
			}
			priority {http.request.header.X-Class} critical normal bulk
			reserve 25%
			status 429
			max_delay 100ms
		}
	}
	respond "ok"
`)
	if err != nil {
		t.Fatalf("caddy adapt: %v\n%s", err, stderr)
	}
	var cfg any
	if err := json.Unmarshal([]byte(out), &cfg); err != nil {
		t.Fatalf("caddy adapt: %v\n%s", err, out)
	}
	z := findAdaptive(cfg)
	if z == nil {
		t.Fatalf("no zone with \"algorithm\":\"adaptive\" in\n%s", out)
	}
	got, _ := json.Marshal(map[string]any{
		"adaptive": z["adaptive"], "priority": z["priority"], "priority_classes": z["priority_classes"],
		"reserve": z["reserve"], "status": z["status"],
	})
	const want = `{"adaptive":{"initial":5,"min":2,"tolerance":1.25},"priority":"{http.request.header.X-Class}",` +
		`"priority_classes":["critical","normal","bulk"],"reserve":0.25,"status":429}`
	if string(got) != want {
		t.Errorf("adapted zone's fields: %s\nwant %s\nzone: %v", got, want, z)
	}
}

// TestContractAdaptiveConfigErrors: `caddy validate` (and, for what the
// Caddyfile parser sees, `caddy adapt`) refuses what the contract
// refuses, naming the option with its file:line, and accepts the
// boundaries it allows. (The zone's key is on line 9, algorithm 10,
// events 11, extra lines from 12; an adaptive block's lines from 13.)
func TestContractAdaptiveConfigErrors(t *testing.T) {
	withoutRedis(t)
	site := func(algorithm, events, extra string) string {
		return fmt.Sprintf(`	rate_limit {
		zone up {
			key static
			algorithm %s
			%s
%s		}
	}
	respond "ok" 200
`, algorithm, events, extra)
	}
	block := func(lines ...string) string {
		return "\t\t\tadaptive {\n\t\t\t\t" + strings.Join(lines, "\n\t\t\t\t") + "\n\t\t\t}\n"
	}
	line := func(s string) string { return "\t\t\t" + s + "\n" }
	tests := []struct {
		name      string
		algorithm string // adaptive unless set
		events    string // "events 10" unless set
		extra     string
		site      string   // the whole site instead
		want      []string // regexps on caddy's output; nil: validates
	}{
		{name: "initial under the default min (4)", extra: block("initial 3"), want: []string{`Caddyfile:1[23]\b`, "initial"}},
		{name: "min 0", extra: block("min 0"), want: []string{`Caddyfile:13\b`, "min"}},
		{name: "tolerance 0", extra: block("tolerance 0"), want: []string{`Caddyfile:13\b`, "tolerance"}},
		{name: "tolerance not a number", extra: block("tolerance fast"), want: []string{`Caddyfile:13\b`, "tolerance"}},
		{name: "min twice", extra: block("min 2", "min 3"), want: []string{`Caddyfile:14\b`, "min"}},
		{name: "unknown adaptive option", extra: block("floor 2"), want: []string{`Caddyfile:13\b`, "floor"}},
		{name: "reserve 91%", extra: line("reserve 91%"), want: []string{`Caddyfile:12\b`, "reserve"}},
		{name: "reserve 90%", extra: line("priority {http.request.header.X-Class} a b") + line("reserve 90%")},
		{name: "reserve 0%", extra: line("priority {http.request.header.X-Class} a b") + line("reserve 0%")},
		{name: "one class", extra: line("priority {http.request.header.X-Class} only")},
		{name: "min = initial = events", extra: block("min 10", "initial 10")},
		{name: "tolerance just over 1", extra: block("tolerance 1.01")},
		{name: "events 0", events: "events 0", want: []string{`Caddyfile:11\b`, "events"}},
		{name: "events 1,000,000", events: "events 1000000"},
		{name: "events over 1,000,000", events: "events 1000001", want: []string{`Caddyfile:11\b`, "events"}},
		{name: "max_delay over 1m", extra: line("max_delay 2m"), want: []string{`Caddyfile:12\b`, "max_delay"}},
		{name: "max_delay 1m", extra: line("max_delay 1m")},
		{name: "status 399", extra: line("status 399"), want: []string{`Caddyfile:12\b`, "status"}},
		{name: "status 600", extra: line("status 600"), want: []string{`Caddyfile:12\b`, "status"}},
		{name: "status on a sliding_window zone", algorithm: "sliding_window", events: "events 10\n\t\t\twindow 1m",
			extra: line("status 429"), want: []string{`Caddyfile:13\b`, "status"}},
		{name: "adaptive block on concurrency", algorithm: "concurrency", extra: block("min 2"), want: []string{`Caddyfile:12\b`, "adaptive"}},
		{name: "same name, adaptive blocks differ", site: `	handle /a {
		rate_limit {
			zone up {
				key static
				algorithm adaptive
				events 10
				adaptive {
					min 2
				}
			}
		}
		respond "a"
	}
	handle /b {
		rate_limit {
			zone up {
				key static
				algorithm adaptive
				events 10
				adaptive {
					min 3
				}
			}
		}
		respond "b"
	}
`, want: []string{"zone up", "adaptive"}},
		{name: "same zone, reserve differs, one class", site: twoHandlers(
			"priority {http.request.header.X-Class} only\n\t\t\t\treserve 10%", "priority {http.request.header.X-Class} only\n\t\t\t\treserve 30%")},
		{name: "same zone, reserve differs, two classes", site: twoHandlers(
			"priority {http.request.header.X-Class} a b\n\t\t\t\treserve 10%", "priority {http.request.header.X-Class} a b\n\t\t\t\treserve 30%"),
			want: []string{"zone up", "reserve"}},
		{name: "same zone, classes differ", site: twoHandlers(
			"priority {http.request.header.X-Class} a b", "priority {http.request.header.X-Class} a c"),
			want: []string{"zone up", "priority"}},
		{name: "same zone, dry_run differs", site: twoHandlers("dry_run", "")},
		{name: "same name, another algorithm", site: `	handle /a {
		rate_limit {
			zone up {
				key static
				algorithm adaptive
				events 10
			}
		}
		respond "a"
	}
	handle /b {
		rate_limit {
			zone up {
				key static
				events 10
				window 1m
			}
		}
		respond "b"
	}
`, want: []string{"zone up", "algorithm"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := tt.site
			if s == "" {
				s = site(cmpOr(tt.algorithm, "adaptive"), cmpOr(tt.events, "events 10"), tt.extra)
			}
			out, err := caddyValidate(t, s)
			if tt.want == nil {
				if err != nil {
					t.Errorf("caddy validate: %v, want success\n%s\n%s", err, s, out)
				}
				return
			}
			if err == nil {
				t.Fatalf("caddy validate: success, want a failure matching %q\n%s", tt.want, s)
			}
			for _, want := range tt.want {
				if !regexp.MustCompile(want).MatchString(out) {
					t.Errorf("caddy validate output does not match %q:\n%s\nsite:\n%s", want, out, s)
				}
			}
			if !strings.HasPrefix(tt.want[0], "Caddyfile:") {
				return // found in provisioning: caddy adapt need not see it
			}
			if _, stderr, err := caddyAdapt(t, s); err == nil {
				t.Errorf("caddy adapt: success, want a failure matching %q", tt.want)
			} else {
				for _, want := range tt.want {
					if !regexp.MustCompile(want).MatchString(stderr) {
						t.Errorf("caddy adapt output does not match %q:\n%s", want, stderr)
					}
				}
			}
		})
	}
}

// TestContractAdaptiveSlotHeldThrough1xx: the slot is held until the
// first non-1xx response header: with a limit of 1, a request whose
// upstream sent 103 Early Hints (forwarded to the client) and holds its
// final answer still holds the slot, so the next request is shed; once
// it is answered, nothing is in flight.
func TestContractAdaptiveSlotHeldThrough1xx(t *testing.T) {
	withoutRedis(t)
	gate := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fast" {
			return
		}
		w.Header().Set("Link", "</style.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
		w.Header().Del("Link")
		_, _ = w.Write([]byte("final"))
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(gate) }) // before Close
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
%s	}
	reverse_proxy %s`, contractZone("up", 1, pinned(1)), strings.TrimPrefix(up.URL, "http://"))})
	client := newClient(4)

	hints := make(chan int, 1)
	ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
			select {
			case hints <- code:
			default:
			}
			return nil
		},
	})
	first := send(ctx, client, caddy.URL+"/", "first")
	select {
	case code := <-hints:
		if code != http.StatusEarlyHints {
			t.Fatalf("client got %d, want 103", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client got no 103 within 10s: cannot check the slot across a 1xx")
	}
	if st := zoneState(t, caddy, "up"); st.InFlight != 1 {
		t.Errorf("after the 103: %+v, want 1 in flight (the slot is held until the final header)", st)
	}
	checkShedAnswer(t, "a request while the first has only had its 103", get(t, client, caddy.URL+"/fast"), "up", http.StatusServiceUnavailable, 1, 1)
	gate <- struct{}{}
	if res := first.wait(t); res.Status != http.StatusOK || res.Body != "final" {
		t.Errorf("first request: %d %q, want 200 final", res.Status, res.Body)
	}
	waitInFlight(t, caddy, "up", 0)
	if got := get(t, client, caddy.URL+"/fast").Status; got != http.StatusOK {
		t.Errorf("after the first was answered: %d, want 200", got)
	}
}

// TestContractAdaptiveShedHeaderStyles: a shed answer carries only the
// adaptive zone's values in every style `headers` picks: the default
// (ietf legacy) has RateLimit-Limit = the class's share and
// RateLimit-Remaining 0, not the other zone's; `x` likewise in
// X-RateLimit-*; `headers none` sends no RateLimit field but still
// Retry-After.
func TestContractAdaptiveShedHeaderStyles(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	handler := func(path, zone, headers string) string {
		return fmt.Sprintf(`	handle %s {
		rate_limit {
%s%s			zone %s_tenant {
				key static
				events 1000
				window 1h
			}
		}
		reverse_proxy %s
	}
`, path, headers, contractZone(zone, 2, pinned(2)), zone, u.addr())
	}
	caddy := startCaddy(t, caddyConfig{Site: handler("/default", "d", "") + handler("/x", "x", "\t\t\theaders x\n") +
		handler("/none", "n", "\t\t\theaders none\n")})
	client := newClient(8)
	for _, path := range []string{"/default", "/x", "/none"} {
		for i := range 2 {
			holdAt(t, u, client, caddy.URL+path, fmt.Sprintf("%s-%d", path, i))
		}
	}

	res := get(t, client, caddy.URL+"/default")
	checkShedAnswer(t, "default headers", res, "d", http.StatusServiceUnavailable, 2, 2)
	if l, r := res.Header.Get("RateLimit-Limit"), res.Header.Get("RateLimit-Remaining"); l != "2" || r != "0" {
		t.Errorf("default headers, shed: RateLimit-Limit %q, RateLimit-Remaining %q, want 2 and 0 (the adaptive zone's share)", l, r)
	}

	res = get(t, client, caddy.URL+"/x")
	if res.Status != http.StatusServiceUnavailable {
		t.Fatalf("/x: status %d, want 503", res.Status)
	}
	if l, r := res.Header.Get("X-RateLimit-Limit"), res.Header.Get("X-RateLimit-Remaining"); l != "2" || r != "0" {
		t.Errorf("headers x, shed: X-RateLimit-Limit %q, X-RateLimit-Remaining %q, want 2 and 0", l, r)
	}

	res = get(t, client, caddy.URL+"/none")
	if res.Status != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
		t.Errorf("headers none, shed: status %d, Retry-After %q, want 503 with a Retry-After", res.Status, res.Header.Get("Retry-After"))
	}
	for _, f := range []string{"RateLimit", "RateLimit-Policy", "RateLimit-Limit", "X-RateLimit-Limit"} {
		if v := res.Header.Values(f); len(v) > 0 {
			t.Errorf("headers none, shed: %s %q, want none", f, v)
		}
	}
}

// validateJSON runs `caddy validate` on a JSON config whose one route
// has a rate_limit handler with the zone up, and returns its output.
func validateJSON(t *testing.T, zone string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	cfg := `{"admin":{"disabled":true},"apps":{"http":{"servers":{"s":{"listen":["127.0.0.1:1"],"routes":[{"handle":[` +
		`{"handler":"rate_limit","rate_limits":{"up":` + zone + `}},{"handler":"static_response","body":"ok"}]}]}}}}}`
	if err := os.WriteFile(filepath.Join(dir, "caddy.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(caddyBin, "validate", "--config", "caddy.json")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestContractAdaptiveJSONValidation: the rules hold for a JSON config
// too (no Caddyfile to parse): Validate refuses each bad value and each
// option refused on an adaptive zone, naming it.
func TestContractAdaptiveJSONValidation(t *testing.T) {
	withoutRedis(t)
	const base = `"algorithm":"adaptive","key":"static","max_events":10`
	const classes = `,"priority":"{http.request.header.X-Class}","priority_classes":["a","b"]`
	tests := []struct {
		name, extra string
		want        string // in the output (case-insensitive); "": validates
	}{
		{"valid", `,"adaptive":{"min":2,"initial":5,"tolerance":1.2}` + classes + `,"reserve":0.9,"status":429`, ""},
		{"min over events", `,"adaptive":{"min":11}`, "min"},
		{"initial over events", `,"adaptive":{"initial":11}`, "initial"},
		{"initial under min", `,"adaptive":{"min":5,"initial":4}`, "initial"},
		{"initial under the default min", `,"adaptive":{"initial":3}`, "initial"},
		{"tolerance 1", `,"adaptive":{"tolerance":1}`, "tolerance"},
		{"reserve 0.95", classes + `,"reserve":0.95`, "reserve"},
		{"reserve negative", classes + `,"reserve":-0.1`, "reserve"},
		{"priority without classes", `,"priority":"{http.request.header.X-Class}"`, "priority"},
		{"a class twice", `,"priority":"{http.request.header.X-Class}","priority_classes":["a","b","a"]`, "priority"},
		{"status 600", `,"status":600`, "status"},
		{"events 0", `,"max_events":0`, "events"},
		{"events over 1,000,000", `,"max_events":1000001`, "events"},
		{"window", `,"window":60000000000`, "window"},
		{"cost", `,"cost":"2"`, "cost"},
		{"burst", `,"burst":5`, "burst"},
		{"period", `,"period":"day"`, "period"},
		{"ban", `,"ban":60000000000`, "ban"},
		{"overrides", `,"overrides":true`, "overrides"},
		{"quota_lease", `,"quota_lease":1000000000`, "quota_lease"},
		{"count_status", `,"count_status":["401"]`, "count_status"},
		{"cost_from_response", `,"cost_from_response":"{http.response.header.X}"`, "cost_from_response"},
		{"events placeholder", `,"events_placeholder":"{http.request.header.E}"`, "events"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			zone := "{" + base + tt.extra + "}"
			if strings.Contains(tt.extra, `"max_events"`) {
				zone = `{"algorithm":"adaptive","key":"static"` + tt.extra + "}"
			}
			out, err := validateJSON(t, zone)
			if tt.want == "" {
				if err != nil {
					t.Errorf("caddy validate %s: %v, want success\n%s", zone, err, out)
				}
				return
			}
			if err == nil {
				t.Errorf("caddy validate %s: success, want a failure naming %q", zone, tt.want)
				return
			}
			if !strings.Contains(strings.ToLower(out), tt.want) {
				t.Errorf("caddy validate %s: output does not name %q:\n%s", zone, tt.want, out)
			}
		})
	}
	t.Run("adaptive block on sliding_window", func(t *testing.T) {
		t.Parallel()
		zone := `{"algorithm":"sliding_window","key":"static","max_events":10,"window":60000000000,"adaptive":{"min":2}}`
		out, err := validateJSON(t, zone)
		if err == nil || !strings.Contains(out, "adaptive") {
			t.Errorf("caddy validate %s: %v, want a failure naming adaptive\n%s", zone, err, out)
		}
	})
}

// TestContractAdaptiveTwoAdaptiveZones: a request two adaptive zones see
// takes a slot in each; when the second sheds it, the first's slot is
// given back (a slot taken is given back when another zone of the same
// request denies), and the answer carries only the shedding zone's
// member. With big (limit 5) and small (limit 1) and one request held,
// ten sheds by small leave big at 1 in flight, not 5.
func TestContractAdaptiveTwoAdaptiveZones(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
%s%s	}
	reverse_proxy %s`, contractZone("big", 5, pinned(5)), contractZone("small", 1, pinned(1)), u.addr())})
	client := newClient(4)
	url := caddy.URL + "/"
	held := holdAt(t, u, client, url, "held")
	for i := range 10 {
		checkShedAnswer(t, fmt.Sprintf("request %d over small's limit", i), get(t, client, url), "small", http.StatusServiceUnavailable, 1, 1)
	}
	if st := zoneState(t, caddy, "big"); st.InFlight != 1 {
		t.Errorf("big after ten requests small shed: %+v, want 1 in flight (the held request's)", st)
	}
	u.releaseAll()
	held.wait(t)
	waitInFlight(t, caddy, "big", 0)
	waitInFlight(t, caddy, "small", 0)
}

// TestContractAdaptiveZeroShare: the share formula has no floor of 1:
// with the limit pinned at 5, reserve 90% and classes critical bulk, bulk
// may use floor(5 × 0.1) = 0 slots, so a bulk request is shed with q=0
// even with nothing in flight, while critical is served.
func TestContractAdaptiveZeroShare(t *testing.T) {
	withoutRedis(t)
	caddy := startCaddy(t, caddyConfig{Site: classMap + fmt.Sprintf(`	rate_limit {
%s	}
	respond "ok"`, contractZone("up", 5, pinned(5)+"\t\t\tpriority {class} critical bulk\n\t\t\treserve 90%\n"))})
	client := newClient(2)
	checkShedAnswer(t, "bulk with a share of 0", get(t, client, caddy.URL+"/", "X-Class", "bulk"), "up", http.StatusServiceUnavailable, 0, 0)
	if got := get(t, client, caddy.URL+"/", "X-Class", "critical").Status; got != http.StatusOK {
		t.Errorf("critical: %d, want 200", got)
	}
}

// TestContractAdaptiveShedThroughErrorRoutes: a shed request is a
// rejection like any: in handle_errors, {http.rate_limit.exceeded.name}
// is the adaptive zone and {http.rate_limit.problem} a problem of its
// status whose type is not quota-exceeded. A priority placeholder that is
// empty (no header) is a value no class lists: the last class.
func TestContractAdaptiveShedThroughErrorRoutes(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
		zone aa {
			key static
			events 1000
			window 1h
		}
%s	}
	reverse_proxy %s
	handle_errors {
		header X-Zone "{http.rate_limit.exceeded.name}"
		respond "{http.rate_limit.problem}"
	}`, contractZone("up", 10, pinned(10)+"\t\t\tpriority {http.request.header.X-Class} critical normal bulk\n\t\t\treserve 20%\n"), u.addr())})
	client := newClient(16)
	url := caddy.URL + "/"
	for i := range 8 {
		holdAt(t, u, client, url, fmt.Sprintf("held-%d", i), "X-Class", "critical")
	}
	res := get(t, client, url) // no X-Class: the last class, bulk (share 8)
	checkShedAnswer(t, "no class header at 8 in flight", res, "up", http.StatusServiceUnavailable, 8, 8)
	if z := res.Header.Get("X-Zone"); z != "up" {
		t.Errorf("{http.rate_limit.exceeded.name} of a shed request: %q, want up", z)
	}
	var p problemBody
	if err := json.Unmarshal([]byte(res.Body), &p); err != nil || p.Status != http.StatusServiceUnavailable ||
		p.Type == "" || strings.Contains(p.Type, "quota-exceeded") {
		t.Errorf("{http.rate_limit.problem} of a shed request: %q (%v), want a problem of status 503, not quota-exceeded", res.Body, err)
	}
	if got := get(t, client, caddy.URL+"/fast", "X-Class", "normal").Status; got != http.StatusOK {
		t.Errorf("normal at 8 in flight: %d, want 200 (its share is 9)", got)
	}
}

// TestContractAdaptiveQueueTimeoutStatus: a request that waited
// max_delay without a slot is shed with the zone's status (429 here),
// counted shed, not delayed.
func TestContractAdaptiveQueueTimeoutStatus(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	caddy := startCaddy(t, queueSite(1, "200ms", "\t\t\tstatus 429\n", u.addr()))
	client := newClient(4)
	held := holdAt(t, u, client, caddy.URL+"/", "held")
	start := time.Now()
	res := get(t, client, caddy.URL+"/")
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("shed after %v, want after max_delay (200ms)", took)
	}
	checkShedAnswer(t, "timed out in the queue", res, "upstream", http.StatusTooManyRequests, 1, 1)
	u.releaseAll()
	held.wait(t)
	if got := decisions(t, caddy, "upstream", "", "shed"); got != 1 {
		t.Errorf("decisions shed: %d, want 1", got)
	}
	if got := decisions(t, caddy, "upstream", "", "delayed"); got != 0 {
		t.Errorf("decisions delayed: %d, want 0 (it never got a slot)", got)
	}
}

// TestContractAdaptiveMatch: an adaptive zone with match sees only the
// requests it matches: with a limit of 1 held under /api, /static is
// served and not counted; a second /api request is shed.
func TestContractAdaptiveMatch(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
		zone up {
			match {
				path /api*
			}
			key static
			algorithm adaptive
			events 1
		}
	}
	reverse_proxy %s`, u.addr())})
	client := newClient(4)
	held := holdAt(t, u, client, caddy.URL+"/api/a", "held")
	res := get(t, client, caddy.URL+"/fast")
	if res.Status != http.StatusOK || len(res.Header.Values("RateLimit")) != 0 {
		t.Errorf("/fast (no zone matches): %d, RateLimit %q, want 200 and no member", res.Status, res.Header.Values("RateLimit"))
	}
	checkShedAnswer(t, "second /api request", get(t, client, caddy.URL+"/api/b"), "up", http.StatusServiceUnavailable, 1, 1)
	u.releaseAll()
	held.wait(t)
	waitInFlight(t, caddy, "up", 0)
}

// latencyUpstream answers every request 200 after a service time the
// test changes while it serves.
type latencyUpstream struct {
	srv     *httptest.Server
	service atomic.Int64 // nanoseconds
}

func startLatencyUpstream(t *testing.T, service time.Duration) *latencyUpstream {
	t.Helper()
	u := &latencyUpstream{}
	u.service.Store(int64(service))
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(time.Duration(u.service.Load())):
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *latencyUpstream) addr() string { return strings.TrimPrefix(u.srv.URL, "http://") }

// TestContractAdaptiveBaselineRisesSlowlyFallsAtOnce: the baseline falls
// at once and rises at most 10% a minute: learned at 20 ms, it stays
// within 10% of that through 3 s of light traffic at 60 ms, and once the
// upstream answers in 2 ms it falls under half of it within 5 s.
func TestContractAdaptiveBaselineRisesSlowlyFallsAtOnce(t *testing.T) {
	withoutRedis(t)
	u := startLatencyUpstream(t, 20*time.Millisecond)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
%s	}
	reverse_proxy %s`, contractZone("up", 100, ""), u.addr())})
	client := newClient(1)
	batch := func() {
		t.Helper()
		for range 5 {
			if res := get(t, client, caddy.URL+"/"); res.Status != http.StatusOK {
				t.Fatalf("status %d, want 200", res.Status)
			}
		}
	}
	// learned: a baseline, steady for 1 s
	for start := time.Now(); time.Since(start) < 2*time.Second; {
		batch()
	}
	waitUntil(t, 15*time.Second, "a baseline learned at 20 ms", func() (bool, string) {
		batch()
		st := zoneState(t, caddy, "up")
		return st.Baseline >= 0.015 && st.Baseline <= 0.030, fmt.Sprintf("%+v", st)
	})
	learned := zoneState(t, caddy, "up").Baseline

	u.service.Store(int64(60 * time.Millisecond))
	for start := time.Now(); time.Since(start) < 3*time.Second; {
		batch()
		if st := zoneState(t, caddy, "up"); st.Baseline > 1.1*learned {
			t.Fatalf("%v into light traffic at 60 ms: %+v, want the baseline within 10%% of %.4f (it rises at most 10%% a minute)",
				time.Since(start).Round(time.Millisecond), st, learned)
		}
	}

	u.service.Store(int64(2 * time.Millisecond))
	start := time.Now()
	waitUntil(t, 5*time.Second, "the baseline fallen under half of what was learned", func() (bool, string) {
		batch()
		st := zoneState(t, caddy, "up")
		return st.Baseline < learned/2, fmt.Sprintf("%+v (learned %.4f)", st, learned)
	})
	t.Logf("baseline learned %.4f s; fell under half of it %v after the upstream sped up", learned, time.Since(start).Round(time.Millisecond))
}

// clientLeavesSite is an adaptive zone (initial 30, min 2) in front of u,
// with a baseline learned at u's 20 ms; it returns the Caddy, the
// baseline learned and a function that sends one request and leaves
// after d.
func clientLeavesSite(t *testing.T, u *capacityUpstream) (*caddyProc, float64, func(d time.Duration) error) {
	t.Helper()
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
%s	}
	reverse_proxy %s`, contractZone("up", 100, startsAt30), u.addr())})
	client := newClient(16)
	learnBaseline(t, caddy, func() error { get(t, client, caddy.URL+"/"); return nil })
	leaveAfter := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(t.Context(), d)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, caddy.URL+"/", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	return caddy, zoneState(t, caddy, "up").Baseline, leaveAfter
}

// TestContractAdaptiveClientLeavesEarlyTeachesNothing: a client that
// leaves before the header counts its elapsed time only above tolerance
// × baseline. With a baseline of 20 ms, 2 s of clients that leave after
// 5 ms (under 1.5 × 20 ms) must teach nothing: the baseline must not
// fall to 5 ms.
func TestContractAdaptiveClientLeavesEarlyTeachesNothing(t *testing.T) {
	withoutRedis(t)
	u := startCapacityUpstream(t, 64, 20*time.Millisecond)
	caddy, learned, leaveAfter := clientLeavesSite(t, u)
	for start := time.Now(); time.Since(start) < 2*time.Second; {
		if err := leaveAfter(5 * time.Millisecond); err == nil {
			t.Fatal("a request answered within 5 ms by a 20 ms upstream")
		}
	}
	if st := zoneState(t, caddy, "up"); st.Baseline < 0.75*learned || st.Limit != 30 {
		t.Errorf("after 2 s of clients leaving at 5 ms: %+v, want the baseline near %.4f and the limit at 30 (they teach nothing)", st, learned)
	}
	// what it costs: requests answered as fast as ever now read as overload
	client := newClient(1)
	sendFor(t, 2*time.Second, client, caddy.URL+"/", http.StatusOK, "one request at a time")
	if st := zoneState(t, caddy, "up"); st.Limit != 30 {
		t.Errorf("after 2 s more of one request at a time at the upstream's usual 20 ms: %+v, want the limit still 30", st)
	}
}

// TestContractAdaptiveClientGivesUpIsOverload: clients that give up
// after 300 ms (over tolerance × a 20 ms baseline) on an upstream that no
// longer answers count their elapsed time: the limit falls under its
// start.
func TestContractAdaptiveClientGivesUpIsOverload(t *testing.T) {
	withoutRedis(t)
	u := startCapacityUpstream(t, 64, 20*time.Millisecond)
	caddy, _, leaveAfter := clientLeavesSite(t, u)
	u.setWorkers(0) // answers nothing: every client gives up
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_ = leaveAfter(300 * time.Millisecond)
			}
		}()
	}
	waitUntil(t, 15*time.Second, "the limit under its start of 30 as clients give up after 300 ms", func() (bool, string) {
		st := zoneState(t, caddy, "up")
		return st.Limit < 30, fmt.Sprintf("%+v", st)
	})
	stop()
	wg.Wait()
	u.setWorkers(64)
}

// TestContractAdaptiveTraces: behind Caddy's tracing directive, an
// adaptive zone's decisions are on the request's span
// (docs/operations.md, Traces): an admitted request's outcome is
// allowed, with every zone that matched; a request that waited for a
// slot, delayed; a request shed (here after max_delay in the queue),
// shed, with that zone alone, its class (a value not listed: the last
// class) and retry_after; a request whose client left while it waited,
// client_left with its class.
func TestContractAdaptiveTraces(t *testing.T) {
	withoutRedis(t)
	rcv := startOTLPReceiver(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	u := startHoldUpstream(t)
	caddy := startCaddy(t, caddyConfig{Global: "\tmetrics", Site: classMap + fmt.Sprintf(`	route {
		tracing {
			span sluice
		}
		rate_limit {
			zone tenant {
				key static
				events 1000
				window 1h
			}
%s		}
		reverse_proxy %s
	}`, contractZone("up", 1, pinned(1)+"\t\t\tpriority {class} critical bulk\n\t\t\treserve 0%\n\t\t\tmax_delay 400ms\n"), u.addr())})
	client := newClient(8)
	url := caddy.URL + "/"

	a := holdAt(t, u, client, url, "a", "X-Class", "critical")
	if res := get(t, client, url, "X-Class", "mystery"); res.Status != http.StatusServiceUnavailable {
		t.Fatalf("b: status %d, want 503 after max_delay", res.Status)
	}
	ctx, leave := context.WithCancel(t.Context())
	d := send(ctx, client, url, "d", "X-Class", "bulk")
	waitInCaddy(t, caddy, 2)
	leave()
	<-d.done
	waitInCaddy(t, caddy, 1)
	c := send(t.Context(), client, url, "c", "X-Class", "critical")
	waitInCaddy(t, caddy, 2)
	u.releaseOne()
	if got := u.waitArrived(t); got != "c" {
		t.Fatalf("%q reached the upstream, want c", got)
	}
	u.releaseAll()
	a.wait(t)
	c.wait(t)

	var spans []*tracepb.Span
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if spans = rcv.decided(); len(spans) >= 4 {
			break
		}
	}
	if len(spans) != 4 {
		t.Fatalf("spans with rate_limit.outcome: %d, want 4", len(spans))
	}
	slices.SortFunc(spans, func(x, y *tracepb.Span) int { return cmp.Compare(x.GetStartTimeUnixNano(), y.GetStartTimeUnixNano()) })
	zonesOf := func(s *tracepb.Span) []string {
		var zones []string
		for _, v := range attr(s, "rate_limit.zones").GetArrayValue().GetValues() {
			zones = append(zones, v.GetStringValue())
		}
		return zones
	}
	for i, w := range []struct {
		name, outcome string
		zones         []string // nil: not checked
		class         string   // "": not checked
		retryAfter    bool
	}{
		{"a", "allowed", []string{"tenant", "up"}, "", false},
		{"b", "shed", []string{"up"}, "bulk", true},
		{"d", "client_left", nil, "bulk", false},
		{"c", "delayed", []string{"tenant", "up"}, "", false},
	} {
		s := spans[i]
		if got := attr(s, "rate_limit.outcome").GetStringValue(); got != w.outcome {
			t.Errorf("span of %s: rate_limit.outcome %q, want %q", w.name, got, w.outcome)
		}
		if got := zonesOf(s); w.zones != nil && !slices.Equal(got, w.zones) {
			t.Errorf("span of %s: rate_limit.zones %v, want %v", w.name, got, w.zones)
		}
		if got := attr(s, "rate_limit.class").GetStringValue(); w.class != "" && got != w.class {
			t.Errorf("span of %s: rate_limit.class %q, want %q", w.name, got, w.class)
		}
		if v := attr(s, "rate_limit.retry_after"); w.retryAfter && (v == nil || v.GetIntValue() < 1) {
			t.Errorf("span of %s: rate_limit.retry_after %v, want ≥ 1", w.name, v)
		}
		t.Logf("span of %s: %v", w.name, s.GetAttributes())
	}
}

// twoHandlers is a site with the adaptive zone up (events 10) declared
// under /a with the line a and under /b with the line b.
func twoHandlers(a, b string) string {
	handler := func(path, line string) string {
		return fmt.Sprintf(`	handle %s {
		rate_limit {
			zone up {
				key static
				algorithm adaptive
				events 10
				%s
			}
		}
		respond "ok"
	}
`, path, line)
	}
	return handler("/a", a) + handler("/b", b)
}

// TestContractAdaptiveWebSocketNotLimited: the slot is held until the
// first non-1xx header, 101 included: a WebSocket-style upgrade through
// reverse_proxy works behind an adaptive zone of limit 1, and while the
// upgraded connection stays open nothing is in flight and the next
// request is served; the tunnel carries data both ways.
func TestContractAdaptiveWebSocketNotLimited(t *testing.T) {
	withoutRedis(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "test-proto" {
			_, _ = w.Write([]byte("plain"))
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: test-proto\r\nConnection: Upgrade\r\n\r\n")
		_ = rw.Flush()
		line, err := rw.ReadString('\n') // echo one line, then hold until the client closes
		if err != nil {
			return
		}
		_, _ = rw.WriteString("echo " + line)
		_ = rw.Flush()
		_, _ = rw.ReadString('\n')
	}))
	t.Cleanup(up.Close)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
%s	}
	reverse_proxy %s`, contractZone("up", 1, pinned(1)), strings.TrimPrefix(up.URL, "http://"))})

	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(caddy.URL, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: test-proto\r\n\r\n",
		strings.TrimPrefix(caddy.URL, "http://")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the upgrade's answer: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade through the adaptive zone: status %d, want 101", resp.StatusCode)
	}
	if _, err := conn.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "echo hello\n" {
		t.Fatalf("through the tunnel: %q (%v), want \"echo hello\\n\"", line, err)
	}
	waitInFlight(t, caddy, "up", 0)
	if res := get(t, newClient(1), caddy.URL+"/plain"); res.Status != http.StatusOK || res.Body != "plain" {
		t.Errorf("a request while the upgraded connection is open: %d %q, want 200 plain (not limited)", res.Status, res.Body)
	}
}

// TestContractAdaptiveFailureModeClosedGivesSlotBack: Sluice's own
// rejections give the slot back and record nothing: with the zone
// tenant's Redis unreachable and failure_mode closed, each request gets
// the 503 of failure_mode closed (not a shed: no adaptive member), the
// adaptive zone of limit 1 is left with nothing in flight, and no
// baseline is learned from them.
func TestContractAdaptiveFailureModeClosedGivesSlotBack(t *testing.T) {
	withoutRedis(t)
	dead := redistest.FreePort(t)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
		redis {
			url redis://127.0.0.1:%d
			timeout 200ms
		}
		failure_mode closed
%s		zone tenant {
			key static
			events 100
			window 1m
		}
	}
	respond "ok"`, dead, contractZone("up", 1, pinned(1)))})
	client := newClient(1)
	for i := range 10 {
		res := get(t, client, caddy.URL+"/")
		if res.Status != http.StatusServiceUnavailable {
			t.Fatalf("request %d with Redis unreachable: status %d, want failure_mode closed's 503", i, res.Status)
		}
		for _, m := range sfMembers(t, res.Header.Values("RateLimit-Policy")) {
			if m.Params["qu"] == "concurrent-requests" {
				t.Fatalf("request %d: RateLimit-Policy %q: a shed answer, want failure_mode closed's (the slot given back)",
					i, res.Header.Values("RateLimit-Policy"))
			}
		}
	}
	waitInFlight(t, caddy, "up", 0)
	if st := zoneState(t, caddy, "up"); st.Baseline != 0 || st.Limit != 1 {
		t.Errorf("after 10 requests failure_mode closed refused: %+v, want no baseline (nothing recorded), limit 1", st)
	}
}

// TestContractAdaptiveHandlerDryRun: the handler's dry_run ("decide,
// count, set headers; never reject") covers its adaptive zones too: over
// the pinned limit of 1, with max_delay, a second request is neither shed
// nor queued but reaches the upstream at once, counted dry_run_shed.
func TestContractAdaptiveHandlerDryRun(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	caddy := startCaddy(t, caddyConfig{Global: "\tmetrics", Site: fmt.Sprintf(`	rate_limit {
		dry_run
%s	}
	reverse_proxy %s`, contractZone("up", 1, pinned(1)+"\t\t\tmax_delay 30s\n"), u.addr())})
	client := newClient(4)
	first := holdAt(t, u, client, caddy.URL+"/", "first")
	second := send(t.Context(), client, caddy.URL+"/", "second")
	select {
	case tag := <-u.arrived:
		if tag != "second" {
			t.Fatalf("%q reached the upstream, want second", tag)
		}
	case <-second.done:
		t.Fatalf("second request: answered %d (%v) without reaching the upstream, want it passed on (handler dry_run)", second.res.Status, second.err)
	case <-time.After(10 * time.Second):
		t.Fatal("second request: not at the upstream after 10 s (queued?), want it passed on at once (handler dry_run)")
	}
	u.releaseAll()
	for _, p := range []*pending{first, second} {
		if res := p.wait(t); res.Status != http.StatusOK {
			t.Errorf("%s: status %d, want 200", p.tag, res.Status)
		}
	}
	if got := decisions(t, caddy, "up", "", "dry_run_shed"); got != 1 {
		t.Errorf("decisions dry_run_shed: %d, want 1", got)
	}
}

// TestContractAdaptiveNoGrowthOnFewSamples: the limit grows only in an
// interval with at least 20 samples: two clients, one request after
// another, on an upstream that answers in 200 ms keep half the limit of 4
// in flight but give about 5 samples an interval: over 4 s the limit
// must not grow.
func TestContractAdaptiveNoGrowthOnFewSamples(t *testing.T) {
	withoutRedis(t)
	u := startLatencyUpstream(t, 200*time.Millisecond)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
%s	}
	reverse_proxy %s`, contractZone("up", 40, "\t\t\tadaptive {\n\t\t\t\tmin 2\n\t\t\t\tinitial 4\n\t\t\t}\n"), u.addr())})
	tr := startClassTraffic(newClient(4), caddy.URL+"/", map[string]int{"x": 2}, 50*time.Millisecond)
	defer tr.stop()
	for start := time.Now(); time.Since(start) < 4*time.Second; time.Sleep(50 * time.Millisecond) {
		if st := zoneState(t, caddy, "up"); st.Limit > 4 {
			t.Fatalf("%v into 2 clients at 200 ms: %+v, want the limit at most its initial 4 (under 20 samples an interval)",
				time.Since(start).Round(time.Millisecond), st)
		}
	}
	tr.stop()
	if n, ok := total(tr.snapshot(), "x", http.StatusOK); ok < 30 || ok != n {
		t.Errorf("answers: %d, of which 200: %d; want all of 30 or more served", n, ok)
	}
}

// TestContractAdaptiveSharesFollowTheLimit: q is the class's share of the
// current limit, not of events or initial: once 503s have taken the
// limit from 20 down to min 5, with reserve 20% bulk and normal may use
// floor(5 × 0.8) = 4 and floor(5 × 0.9) = 4 slots, critical 5.
func TestContractAdaptiveSharesFollowTheLimit(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	fail := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(fail.Close)
	caddy := startCaddy(t, caddyConfig{Site: classMap + fmt.Sprintf(`	rate_limit {
%s	}
	handle /fail {
		reverse_proxy %s
	}
	handle {
		reverse_proxy %s
	}`, contractZone("up", 20, "\t\t\tadaptive {\n\t\t\t\tmin 5\n\t\t\t}\n\t\t\tpriority {class} critical normal bulk\n\t\t\treserve 20%\n"),
		strings.TrimPrefix(fail.URL, "http://"), u.addr())})
	client := newClient(16)
	url := caddy.URL + "/"
	waitUntil(t, 15*time.Second, "a baseline learned", func() (bool, string) {
		for range 10 {
			if res := get(t, client, caddy.URL+"/fast", "X-Class", "critical"); res.Status != http.StatusOK {
				return false, fmt.Sprintf("/fast: %d", res.Status)
			}
		}
		st := zoneState(t, caddy, "up")
		return st.Baseline > 0, fmt.Sprintf("%+v", st)
	})
	waitUntil(t, 20*time.Second, "the limit down to min 5 under 503s", func() (bool, string) {
		for range 10 {
			if res := get(t, client, caddy.URL+"/fail", "X-Class", "critical"); res.Status != http.StatusServiceUnavailable {
				return false, fmt.Sprintf("/fail: %d", res.Status)
			}
		}
		st := zoneState(t, caddy, "up")
		return st.Limit == 5, fmt.Sprintf("%+v", st)
	})
	for i := range 4 {
		holdAt(t, u, client, url, fmt.Sprintf("bulk-%d", i), "X-Class", "bulk")
	}
	checkShedAnswer(t, "bulk at 4 in flight, limit 5", get(t, client, url, "X-Class", "bulk"), "up", http.StatusServiceUnavailable, 4, 4)
	checkShedAnswer(t, "normal at 4 in flight, limit 5", get(t, client, url, "X-Class", "normal"), "up", http.StatusServiceUnavailable, 4, 4)
	holdAt(t, u, client, url, "critical-0", "X-Class", "critical")
	checkShedAnswer(t, "critical at 5 in flight, limit 5", get(t, client, url, "X-Class", "critical"), "up", http.StatusServiceUnavailable, 5, 5)
}

// TestContractAdaptiveNestedRejectionTeachesNothing: Sluice's own
// rejections give the slot back and record nothing, also those of a
// rate_limit handler further down the route: with an adaptive zone in the
// site's handler and a per-key zone in a handler under /api, 2 s of fast
// 429s from the inner zone must not pull the baseline (learned at 20 ms)
// down, nor make the upstream's usual answers read as overload.
func TestContractAdaptiveNestedRejectionTeachesNothing(t *testing.T) {
	withoutRedis(t)
	u := startLatencyUpstream(t, 20*time.Millisecond)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
%s	}
	handle /api* {
		rate_limit {
			zone per_key {
				key {http.request.header.X-Key}
				events 1
				window 1h
			}
		}
		reverse_proxy %s
	}`, contractZone("up", 100, startsAt30), u.addr())})
	client := newClient(1)
	n := 0
	served := func() {
		t.Helper()
		n++
		if res := get(t, client, caddy.URL+"/api", "X-Key", fmt.Sprintf("k%d", n)); res.Status != http.StatusOK {
			t.Fatalf("a fresh key: %d, want 200", res.Status)
		}
	}
	learned := learnBaseline(t, caddy, func() error { served(); return nil })
	served() // key k<n> used up
	spent := fmt.Sprintf("k%d", n)
	sendFor(t, 2*time.Second, client, caddy.URL+"/api", http.StatusTooManyRequests, "a spent key (the inner zone's 429)", "X-Key", spent)
	if st := zoneState(t, caddy, "up"); st.Baseline < 0.75*learned || st.Limit != 30 {
		t.Errorf("after 2 s of the inner zone's 429s: %+v, want the baseline near %.4f and the limit at 30 (they teach nothing)", st, learned)
	}
	for start := time.Now(); time.Since(start) < 2*time.Second; {
		served()
	}
	if st := zoneState(t, caddy, "up"); st.Limit != 30 {
		t.Errorf("after 2 s more of the upstream's usual 20 ms answers: %+v, want the limit still 30", st)
	}
}

// TestContractAdaptiveNestedFailureClosedNotOverload: failure_mode
// closed's 503 is Sluice's own rejection, not the upstream's overload:
// with an adaptive zone in the site's handler and, under /api, a handler
// whose Redis is unreachable (failure_mode closed), 2 s of its 503s must
// not shrink the adaptive limit.
func TestContractAdaptiveNestedFailureClosedNotOverload(t *testing.T) {
	withoutRedis(t)
	u := startLatencyUpstream(t, 20*time.Millisecond)
	dead := redistest.FreePort(t)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
%s	}
	handle /api* {
		rate_limit {
			redis {
				url redis://127.0.0.1:%d
				timeout 200ms
			}
			failure_mode closed
			zone tenant {
				key static
				events 100
				window 1m
			}
		}
		reverse_proxy %s
	}
	handle {
		reverse_proxy %s
	}`, contractZone("up", 100, startsAt30), dead, u.addr(), u.addr())})
	client := newClient(1)
	learnBaseline(t, caddy, func() error {
		if res := get(t, client, caddy.URL+"/"); res.Status != http.StatusOK {
			return fmt.Errorf("/: %d", res.Status)
		}
		return nil
	})
	sendFor(t, 2*time.Second, client, caddy.URL+"/api", http.StatusServiceUnavailable, "/api with its Redis unreachable (failure_mode closed's 503)")
	if st := zoneState(t, caddy, "up"); st.Limit != 30 {
		t.Errorf("after 2 s of failure_mode closed's 503s under /api: %+v, want the limit still 30 (Sluice's own rejection records nothing)", st)
	}
}

// TestContractAdaptiveJWTClasses: the recipe's priority {jwt.tier}: the
// class is read from a verified claim of the handler's jwt block: with
// the limit pinned at 10 and reserve 20%, a bulk token is shed at 8 in
// flight while a critical token is admitted up to 10; a forged critical
// token (wrong secret) has no tier, the last class.
func TestContractAdaptiveJWTClasses(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
		jwt {
			secret right-secret
		}
%s	}
	reverse_proxy %s`, contractZone("up", 10, pinned(10)+"\t\t\tpriority {jwt.tier} critical normal bulk\n\t\t\treserve 20%\n"), u.addr())})
	client := newClient(16)
	url := caddy.URL + "/"
	token := func(secret, tier string) string {
		return "Bearer " + hs256(t, secret, jwt.MapClaims{"sub": "s", "tier": tier})
	}
	critical, bulk, forged := token("right-secret", "critical"), token("right-secret", "bulk"), token("wrong-secret", "critical")
	for i := range 8 {
		holdAt(t, u, client, url, fmt.Sprintf("bulk-%d", i), "Authorization", bulk)
	}
	checkShedAnswer(t, "bulk token at 8", get(t, client, url, "Authorization", bulk), "up", http.StatusServiceUnavailable, 8, 8)
	checkShedAnswer(t, "forged critical token at 8", get(t, client, url, "Authorization", forged), "up", http.StatusServiceUnavailable, 8, 8)
	for i := range 2 {
		holdAt(t, u, client, url, fmt.Sprintf("critical-%d", i), "Authorization", critical)
	}
	checkShedAnswer(t, "critical token at 10", get(t, client, url, "Authorization", critical), "up", http.StatusServiceUnavailable, 10, 10)
}

// TestContractAdaptiveNestedShedNotOverload: a shed is Sluice's own
// rejection too: with an adaptive zone site in the site's handler and an
// adaptive zone api (limit 1) in a handler under /api, 2 s of api's sheds
// (its one slot held) must not shrink site's limit: the upstream is
// healthy.
func TestContractAdaptiveNestedShedNotOverload(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	caddy := startCaddy(t, caddyConfig{Site: fmt.Sprintf(`	rate_limit {
%s	}
	handle /api* {
		rate_limit {
%s		}
		reverse_proxy %s
	}
	handle {
		reverse_proxy %s
	}`, contractZone("site", 100, startsAt30), contractZone("api", 1, pinned(1)), u.addr(), u.addr())})
	client := newClient(4)
	waitUntil(t, 15*time.Second, "a baseline learned", func() (bool, string) {
		for range 10 {
			if res := get(t, client, caddy.URL+"/fast"); res.Status != http.StatusOK {
				return false, fmt.Sprintf("/fast: %d", res.Status)
			}
		}
		st := zoneState(t, caddy, "site")
		return st.Baseline > 0, fmt.Sprintf("%+v", st)
	})
	holdAt(t, u, client, caddy.URL+"/api/held", "held")
	for start := time.Now(); time.Since(start) < 2*time.Second; {
		res := get(t, client, caddy.URL+"/api/x")
		checkShedAnswer(t, "/api with api's slot held", res, "api", http.StatusServiceUnavailable, 1, 1)
		if t.Failed() {
			t.FailNow()
		}
	}
	if st := zoneState(t, caddy, "site"); st.Limit != 30 {
		t.Errorf("after 2 s of api's sheds: %+v, want site's limit still 30 (a shed is Sluice's own rejection)", st)
	}
}
