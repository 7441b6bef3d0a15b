package sluice

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// shedHandler is a handler of one adaptive zone whose limit stays at
// events (min = initial = events), with extra options.
func shedHandler(t *testing.T, zone string, events int, extra ...string) *Handler {
	t.Helper()
	return newHandler(t, fmt.Sprintf("rate_limit {\n\tzone %s {\n\t\tkey static\n\t\talgorithm adaptive\n\t\tevents %d\n\t\tadaptive {\n\t\t\tmin %d\n\t\t}\n\t\t%s\n\t}\n}",
		zone, events, events, strings.Join(extra, "\n\t\t")))
}

// call is one request served in the background.
type call struct {
	rec     *httptest.ResponseRecorder
	err     error
	entered chan struct{} // closed when it reached the next handler
	done    chan struct{} // closed when ServeHTTP returned
}

// start serves a request with headers through h; the next handler
// blocks until release is closed, then runs answer.
func start(h *Handler, ctx context.Context, headers map[string]string, release <-chan struct{}, answer func(http.ResponseWriter) error) *call {
	c := &call{rec: httptest.NewRecorder(), entered: make(chan struct{}), done: make(chan struct{})}
	req := httptest.NewRequest(http.MethodGet, "http://example.com/api", nil).WithContext(ctx)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req = caddyhttp.PrepareRequest(req, caddy.NewReplacer(), c.rec, nil)
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) error {
		close(c.entered)
		<-release
		return answer(w)
	})
	go func() {
		defer close(c.done)
		defer func() { _ = recover() }()
		c.err = h.ServeHTTP(c.rec, req, next)
	}()
	return c
}

func ok200(w http.ResponseWriter) error { w.WriteHeader(http.StatusOK); return nil }

// shedStatus is the status a request was answered with, from its error
// (handle_errors's way) or its recorder.
func (c *call) status() int {
	if he, ok := c.err.(caddyhttp.HandlerError); ok {
		return he.StatusCode
	}
	return c.rec.Code
}

func inFlight(t *testing.T, zone string) int {
	t.Helper()
	_, n, _, ok := shedZoneState(zone)
	if !ok {
		t.Fatalf("zone %s not in force", zone)
	}
	return n
}

func TestAdaptiveShedsOverTheLimit(t *testing.T) {
	zone := uniqueZone("shed")
	h := shedHandler(t, zone, 2)
	release := make(chan struct{})
	held := []*call{start(h, t.Context(), nil, release, ok200), start(h, t.Context(), nil, release, ok200)}
	for _, c := range held {
		<-c.entered
	}
	shed := start(h, t.Context(), nil, release, ok200)
	<-shed.done
	select {
	case <-shed.entered:
		t.Fatal("a shed request reached the next handler")
	default:
	}
	if got := shed.status(); got != http.StatusServiceUnavailable {
		t.Errorf("status = %d, want 503", got)
	}
	hdr := shed.rec.Header()
	if hdr.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	if got, want := hdr.Get("RateLimit-Policy"), fmt.Sprintf(`%q;q=2;qu="concurrent-requests"`, zone); got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	if got := hdr.Get("RateLimit"); !strings.HasPrefix(got, fmt.Sprintf(`%q;r=0`, zone)) {
		t.Errorf("RateLimit = %q, want r=0", got)
	}
	close(release)
	for _, c := range held {
		<-c.done
		if c.status() != http.StatusOK {
			t.Errorf("held request answered %d", c.status())
		}
	}
	if n := inFlight(t, zone); n != 0 {
		t.Errorf("in flight after the answers = %d, want 0", n)
	}
	again := start(h, t.Context(), nil, release, ok200)
	<-again.done
	if again.status() != http.StatusOK {
		t.Errorf("after the slots were released: status %d, want 200", again.status())
	}
}

func TestAdaptiveProblemDetailsAndStatus(t *testing.T) {
	zone := uniqueZone("shed")
	h := newHandler(t, fmt.Sprintf("rate_limit {\n\tproblem_details\n\tzone %s {\n\t\tkey static\n\t\talgorithm adaptive\n\t\tevents 1\n\t\tstatus 529\n\t}\n}", zone))
	release := make(chan struct{})
	defer close(release)
	held := start(h, t.Context(), nil, release, ok200)
	<-held.entered
	shed := start(h, t.Context(), nil, release, ok200)
	<-shed.done
	if shed.rec.Code != 529 {
		t.Errorf("status = %d, want the zone's 529", shed.rec.Code)
	}
	body := shed.rec.Body.String()
	if strings.Contains(body, "quota-exceeded") || !strings.Contains(body, "#overloaded") {
		t.Errorf("problem body %s: want type overloaded, not quota-exceeded", body)
	}
	if ct := shed.rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q", ct)
	}
}

func TestAdaptivePrioritySheddingOrder(t *testing.T) {
	zone := uniqueZone("shed")
	// limit 10; bulk's share is 8
	h := shedHandler(t, zone, 10, "priority {http.request.header.X-Tier} critical bulk", "reserve 20%")
	release := make(chan struct{})
	var held []*call
	for range 8 {
		c := start(h, t.Context(), map[string]string{"X-Tier": "bulk"}, release, ok200)
		<-c.entered
		held = append(held, c)
	}
	bulk := start(h, t.Context(), map[string]string{"X-Tier": "unknown"}, release, ok200) // not listed: the last class
	<-bulk.done
	if bulk.status() != http.StatusServiceUnavailable {
		t.Errorf("bulk over its share: status %d, want 503", bulk.status())
	}
	if got, want := bulk.rec.Header().Get("RateLimit-Policy"), fmt.Sprintf(`%q;q=8;qu="concurrent-requests"`, zone); got != want {
		t.Errorf("RateLimit-Policy = %q, want %q (bulk's share)", got, want)
	}
	for range 2 {
		c := start(h, t.Context(), map[string]string{"X-Tier": "critical"}, release, ok200)
		select {
		case <-c.entered:
		case <-c.done:
			t.Fatalf("critical request inside the reserve shed: %d", c.status())
		}
		held = append(held, c)
	}
	critical := start(h, t.Context(), map[string]string{"X-Tier": "critical"}, release, ok200)
	<-critical.done
	if critical.status() != http.StatusServiceUnavailable {
		t.Errorf("critical over the limit: status %d, want 503", critical.status())
	}
	close(release)
	for _, c := range held {
		<-c.done
	}
}

func TestAdaptiveSlotGivenBackWhenAnotherZoneDenies(t *testing.T) {
	zone := uniqueZone("shed")
	h := newHandler(t, fmt.Sprintf("rate_limit {\n\tzone %s {\n\t\tkey static\n\t\talgorithm adaptive\n\t\tevents 1\n\t}\n\tzone %s {\n\t\tkey static\n\t\tevents 1\n\t\twindow 1m\n\t}\n}", zone, uniqueZone("rate")))
	release := make(chan struct{})
	close(release)
	first := start(h, t.Context(), nil, release, ok200)
	<-first.done
	denied := start(h, t.Context(), nil, release, ok200)
	<-denied.done
	if denied.status() != http.StatusTooManyRequests {
		t.Fatalf("second request: status %d, want the rate zone's 429", denied.status())
	}
	if n := inFlight(t, zone); n != 0 {
		t.Errorf("in flight after another zone denied = %d, want 0: the slot given back", n)
	}
}

func TestAdaptiveSlotReleasedOnPanicAndClientLeaving(t *testing.T) {
	zone := uniqueZone("shed")
	h := shedHandler(t, zone, 1)
	release := make(chan struct{})
	close(release)
	panicked := start(h, t.Context(), nil, release, func(http.ResponseWriter) error { panic(http.ErrAbortHandler) })
	<-panicked.done
	if n := inFlight(t, zone); n != 0 {
		t.Fatalf("in flight after a panic = %d, want 0", n)
	}
	ctx, cancel := context.WithCancel(t.Context())
	hold := make(chan struct{})
	left := start(h, ctx, nil, hold, func(http.ResponseWriter) error { return ctx.Err() })
	<-left.entered
	cancel()
	close(hold)
	<-left.done
	if n := inFlight(t, zone); n != 0 {
		t.Errorf("in flight after the client left = %d, want 0", n)
	}
}

func TestAdaptiveMaxDelayWaitsAndLeaves(t *testing.T) {
	zone := uniqueZone("shed")
	h := shedHandler(t, zone, 1, "max_delay 1m")
	release := make(chan struct{})
	held := start(h, t.Context(), nil, release, ok200)
	<-held.entered
	ctx, cancel := context.WithCancel(t.Context())
	waiter := start(h, ctx, nil, release, ok200)
	waitFor(t, "one waiting", func() bool { s, _ := h.shedZones[0].shed.set.states(time.Now()); return s.Waiting == 1 })
	queued := start(h, t.Context(), nil, release, ok200)
	waitFor(t, "two waiting", func() bool { s, _ := h.shedZones[0].shed.set.states(time.Now()); return s.Waiting == 2 })
	cancel() // the first waiter's client leaves
	<-waiter.done
	if waiter.rec.Code != statusClientClosed {
		t.Errorf("waiter whose client left: status %d, want %d", waiter.rec.Code, statusClientClosed)
	}
	close(release)
	<-held.done
	<-queued.done
	if queued.status() != http.StatusOK {
		t.Errorf("queued request: status %d, want 200 once the slot was free", queued.status())
	}
	if n := inFlight(t, zone); n != 0 {
		t.Errorf("in flight = %d, want 0", n)
	}
}

func TestAdaptiveDryRunShedsNothing(t *testing.T) {
	zone := uniqueZone("shed")
	h := shedHandler(t, zone, 1, "dry_run")
	release := make(chan struct{})
	a := start(h, t.Context(), nil, release, ok200)
	<-a.entered
	b := start(h, t.Context(), nil, release, ok200)
	select {
	case <-b.entered:
	case <-b.done:
		t.Fatalf("dry run shed a request: %d", b.status())
	}
	if n := inFlight(t, zone); n != 2 {
		t.Errorf("in flight = %d, want 2", n)
	}
	close(release)
	<-a.done
	<-b.done
}

func TestAdaptiveLimiterKeptAcrossReloads(t *testing.T) {
	zone := uniqueZone("shed")
	old := shedHandler(t, zone, 5)
	kept := shedHandler(t, zone, 5, "reserve 10%")
	if old.shedZones[0].shed.set != kept.shedZones[0].shed.set {
		t.Error("same events, min and classes: want the limiters kept")
	}
	changed := shedHandler(t, zone, 6)
	if changed.shedZones[0].shed.set == kept.shedZones[0].shed.set {
		t.Error("events changed: want new limiters")
	}
}

// TestAdaptiveAdmittedMember: an admitted request carries the adaptive
// zone's member beside the other zones', in name order: q its class's
// share, r what was left of it once its slot was taken; the count styles
// report the zone with the least left.
func TestAdaptiveAdmittedMember(t *testing.T) {
	zone := uniqueZone("a-shed") // sorts before the rate zone
	rate := uniqueZone("b-rate")
	h := newHandler(t, fmt.Sprintf("rate_limit {\n\tzone %s {\n\t\tkey static\n\t\talgorithm adaptive\n\t\tevents 5\n\t\tadaptive {\n\t\t\tmin 5\n\t\t}\n\t\tpriority {http.request.header.X-Tier} critical bulk\n\t\treserve 40%%\n\t}\n\tzone %s {\n\t\tkey static\n\t\tevents 100\n\t\twindow 1m\n\t}\n}", zone, rate))
	release := make(chan struct{})
	first := start(h, t.Context(), map[string]string{"X-Tier": "bulk"}, release, ok200)
	<-first.entered
	second := start(h, t.Context(), map[string]string{"X-Tier": "critical"}, release, ok200)
	<-second.entered
	close(release)
	<-first.done
	<-second.done
	for _, tt := range []struct {
		c    *call
		q, r int
	}{
		{first, 3, 2},  // bulk: floor(5 × 0.6) = 3, one in flight
		{second, 5, 3}, // critical: 5, two in flight
	} {
		hdr := tt.c.rec.Header()
		wantPolicy := fmt.Sprintf(`%q;q=%d;qu="concurrent-requests", %q;q=100;w=60`, zone, tt.q, rate)
		if got := hdr.Get("RateLimit-Policy"); got != wantPolicy {
			t.Errorf("RateLimit-Policy = %q, want %q", got, wantPolicy)
		}
		if got, want := hdr.Get("RateLimit"), fmt.Sprintf(`%q;r=%d;t=0, %q;r=`, zone, tt.r, rate); !strings.HasPrefix(got, want) {
			t.Errorf("RateLimit = %q, want it to start %q", got, want)
		}
		if got, want := hdr.Get("RateLimit-Limit"), fmt.Sprint(tt.q); got != want {
			t.Errorf("RateLimit-Limit = %q, want %s (the adaptive zone has the least left)", got, want)
		}
	}
	// an adaptive zone alone: its member, no Retry-After
	only := shedHandler(t, uniqueZone("shed"), 1)
	done := make(chan struct{})
	close(done)
	c := start(only, t.Context(), nil, done, ok200)
	<-c.done
	if got := c.rec.Header().Get("RateLimit"); !strings.HasSuffix(got, ";r=0;t=1") || c.rec.Header().Get("Retry-After") != "" {
		t.Errorf("alone: RateLimit %q, Retry-After %q; want r=0;t=1 (its only slot taken) and no Retry-After", got, c.rec.Header().Get("Retry-After"))
	}
}
