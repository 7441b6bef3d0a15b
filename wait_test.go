package sluice

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// delayedZone is a token bucket of events per window with a burst of 1 and
// max_delay, plus extra lines.
func delayedZone(name string, events int, window, maxDelay string, extra ...string) string {
	lines := append([]string{"key k", "algorithm token_bucket", "events " + strconv.Itoa(events), "window " + window,
		"burst 1", "max_delay " + maxDelay}, extra...)
	return rateLimit(zoneCfg(name, lines...))
}

// TestServeHTTPMaxDelay: four requests at once on 4/s, burst 1 and
// max_delay 600ms: one passes at once, two wait for their turns (250ms
// apart: at least that long, a reservation is never early) showing
// remaining 0, and one, whose turn is 750ms away, is denied; the outcomes
// and the waits are counted.
func TestServeHTTPMaxDelay(t *testing.T) {
	zone := uniqueZone("delay")
	h := newHandler(t, delayedZone(zone, 4, "1s", "600ms"))
	type outcomeOf struct {
		res  result
		took time.Duration
	}
	results := make(chan outcomeOf, 4)
	start := time.Now()
	for range 4 {
		go func() {
			res := serve(t, h, reqOpts{})
			results <- outcomeOf{res, time.Since(start)}
		}()
	}
	var passed []time.Duration
	denied := 0
	for range 4 {
		o := <-results
		switch {
		case o.res.allowed():
			if got, want := o.res.header("RateLimit"), ";r=0;"; !strings.Contains(got, want) {
				t.Errorf("RateLimit: got %q, want it to contain %q", got, want)
			}
			passed = append(passed, o.took)
		case o.res.status() == http.StatusTooManyRequests:
			denied++
		default:
			t.Errorf("got err %v, next %d; want passed on or 429", o.res.err, o.res.next)
		}
	}
	slices.Sort(passed)
	if len(passed) != 3 || denied != 1 {
		t.Fatalf("passed %d, denied %d; want 3, 1", len(passed), denied)
	}
	for k, took := range passed {
		if turn := time.Duration(k) * 250 * time.Millisecond; took < turn {
			t.Errorf("request %d passed on after %v, want at least its turn %v", k, took, turn)
		}
	}
	m := h.zones[0]
	for _, c := range []struct {
		outcome outcome
		want    float64
	}{{outcomeAllowed, 1}, {outcomeDelayed, 2}, {outcomeDenied, 1}} {
		if got := testutilValue(t, m.metrics.outcomes[c.outcome]); got != c.want {
			t.Errorf("outcome %s: got %v, want %v", outcomeNames[c.outcome], got, c.want)
		}
	}
	if got, want := sampleCount(t, m.delay.waits), uint64(2); got != want {
		t.Errorf("delay_seconds samples: got %d, want %d", got, want)
	}
}

// TestServeHTTPMaxDelayClientLeaves: a client that leaves while its
// request waits ends the wait at once: the request is not passed on, it is
// logged as 499 and counted as abandoned.
func TestServeHTTPMaxDelayClientLeaves(t *testing.T) {
	zone := uniqueZone("delay-leave")
	h := newHandler(t, delayedZone(zone, 1, "50s", "1m")) // the second request's turn: in 50s
	if res := serve(t, h, reqOpts{}); !res.allowed() {
		t.Fatalf("first request: got err %v, want passed on", res.err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "http://example.com/api", nil)
	rec := httptest.NewRecorder()
	req = caddyhttp.PrepareRequest(req, caddy.NewReplacer(), rec, nil)
	nexts := 0
	done := make(chan error, 1)
	go func() {
		done <- h.ServeHTTP(rec, req, caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
			nexts++
			return nil
		}))
	}()
	waitFor(t, "the request to wait", func() bool { return sampleCount(t, h.zones[0].delay.waits) == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ServeHTTP: got %v, want nil", err)
	}
	if nexts != 0 || rec.Code != statusClientClosed {
		t.Errorf("left client: next called %d times, status %d; want 0, %d", nexts, rec.Code, statusClientClosed)
	}
	if got := testutilValue(t, h.zones[0].delay.abandoned); got != 1 {
		t.Errorf("delay_abandoned_total: got %v, want 1", got)
	}
}

// TestServeHTTPMaxDelayDryRun: a dry-run zone never holds a request, nor
// does a handler in dry_run.
func TestServeHTTPMaxDelayDryRun(t *testing.T) {
	tests := []struct {
		name, input string
		outcome     outcome
	}{
		{"zone dry_run", delayedZone(uniqueZone("delay-dry"), 1, "50s", "1m", "dry_run"), outcomeDryRunDenied},
		{"handler dry_run", strings.Replace(delayedZone(uniqueZone("delay-hdry"), 1, "50s", "1m"), "rate_limit {", "rate_limit {\n\tdry_run", 1), outcomeAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHandler(t, tt.input)
			for i := range 3 {
				if res := serve(t, h, reqOpts{}); !res.allowed() {
					t.Fatalf("request %d: got err %v, next %d; want passed on", i, res.err, res.next)
				}
			}
			if got := testutilValue(t, h.zones[0].metrics.outcomes[outcomeDelayed]); got != 0 {
				t.Errorf("delayed: got %v, want 0", got)
			}
			if got := testutilValue(t, h.zones[0].metrics.outcomes[tt.outcome]); got < 1 {
				t.Errorf("%s: got %v, want at least 1", outcomeNames[tt.outcome], got)
			}
		})
	}
}

// waitFor polls cond until it holds, failing t after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestServeHTTPMaxDelayWaitingBound: a handler holds at most its bound of
// requests waiting at once (3 here; defaultMaxWaiting in use). At 1/s with
// burst 1 and max_delay 1m, the first request passes at once and the next
// three wait for their turns; past the bound, requests that would wait are
// rejected with Retry-After as if their wait were too long, and consume
// nothing (both see the same Retry-After: the turn after the three
// reservations). A wait that ends frees its place for the next.
func TestServeHTTPMaxDelayWaitingBound(t *testing.T) {
	const bound = 3
	h := newHandler(t, delayedZone(uniqueZone("delay-bound"), 60, "1m", "1m"))
	if got, want := h.waiting.limit, int64(defaultMaxWaiting); got != want {
		t.Fatalf("waiting bound: got %d, want the default %d", got, want)
	}
	h.waiting.limit = bound
	if res := serve(t, h, reqOpts{}); !res.allowed() {
		t.Fatalf("first request: got err %v, want passed on at once", res.err)
	}
	waits := h.zones[0].delay.waits
	var ws waiters
	defer ws.end()
	for i := range bound {
		ws.start(h, "")
		waitFor(t, fmt.Sprintf("request %d to wait", i+2), func() bool { return sampleCount(t, waits) == uint64(i+1) })
	}
	for i := range 2 {
		res := serve(t, h, reqOpts{})
		wantDenied(t, res, http.StatusTooManyRequests)
		if got, want := retryAfter(t, res), int64(bound+1); got != want {
			t.Errorf("request over the bound %d: Retry-After got %d, want %d (its turn after the %d reservations; the rejection took none)", i, got, want, bound)
		}
	}
	if err := ws.leave(); err != nil { // a client leaves: its wait ends, its place is free
		t.Fatalf("request that left: got %v, want nil", err)
	}
	ws.start(h, "")
	waitFor(t, "a request to wait in the freed place", func() bool { return sampleCount(t, waits) == bound+1 })
	if got, want := h.waiting.n.Load(), int64(bound); got != want {
		t.Errorf("requests waiting: got %d, want %d", got, want)
	}
}

// TestWaitPlaceOnlyForWaiters: only a request one of whose zones has
// max_delay takes a place among the waiting; the others (and the handler's
// requests while every place is taken) leave the count alone, so decisions
// that cannot wait never crowd out those that may.
func TestWaitPlaceOnlyForWaiters(t *testing.T) {
	h := newHandler(t, delayedZone(uniqueZone("delay-place"), 60, "1m", "1m"))
	plain := []algorithms.Request{{Key: "k", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Minute}}}
	p, _ := h.waiting.take(plain)
	if got := h.waiting.n.Load(); got != 0 {
		t.Errorf("places taken by a request that cannot wait: got %d, want 0", got)
	}
	p.release()
	delayed := []algorithms.Request{{Key: "k", Limit: h.zones[0].limit}}
	p, _ = h.waiting.take(delayed)
	if got := h.waiting.n.Load(); got != 1 {
		t.Errorf("places taken by a request that may wait: got %d, want 1", got)
	}
	p.release()
	if got := h.waiting.n.Load(); got != 0 {
		t.Errorf("places after release: got %d, want 0", got)
	}
}

// TestWaitPlacePerKey: one key holds at most perKey of a handler's places,
// so a hot key cannot take them all: past its bound, its requests may not
// wait (their max_delay is dropped, so one that would wait is rejected)
// while another key still takes a place; a request of several keys takes
// a place of each or none; a released place frees its key's, and a sweep
// drops the keys holding none.
func TestWaitPlacePerKey(t *testing.T) {
	h := newHandler(t, delayedZone(uniqueZone("delay-perkey"), 60, "1m", "1m"))
	w := h.waiting
	if got, want := w.perKey, int64(defaultMaxWaitingPerKey); got != want {
		t.Fatalf("per-key bound: got %d, want the default %d", got, want)
	}
	w.perKey = 2
	limit := h.zones[0].limit
	reqsOf := func(keys ...string) []algorithms.Request {
		var reqs []algorithms.Request
		for _, k := range keys {
			reqs = append(reqs, algorithms.Request{Key: k, Limit: limit})
		}
		return reqs
	}
	steps := []struct {
		name   string
		keys   []string
		placed bool
	}{
		{"hot key, first place", []string{"hot"}, true},
		{"hot key, second place", []string{"hot"}, true},
		{"hot key past its bound", []string{"hot"}, false},
		{"another key", []string{"cold"}, true},
		{"both keys: the hot one is full", []string{"cold", "hot"}, false},
	}
	var held []place
	for _, s := range steps {
		reqs := reqsOf(s.keys...)
		p, refused := w.take(reqs)
		if got := p.w != nil; got != s.placed || refused == s.placed {
			t.Errorf("%s: got a place %v, want %v", s.name, got, s.placed)
		}
		if got, want := reqs[0].Limit.MaxDelay > 0, s.placed; got != want {
			t.Errorf("%s: may wait %v, want %v", s.name, got, want)
		}
		held = append(held, p)
	}
	if got, want := w.n.Load(), int64(3); got != want {
		t.Errorf("handler places taken: got %d, want %d (refusals take none)", got, want)
	}
	if got, want := w.heldBy("cold"), int64(1); got != want {
		t.Errorf("places of the other key: got %d, want %d (a refusal of two keys takes neither)", got, want)
	}
	held[0].release()
	if p, _ := w.take(reqsOf("hot")); p.w == nil {
		t.Error("hot key after one of its places was released: got no place, want one")
	} else {
		p.release()
	}
	for i := range held {
		held[i].release()
	}
	if hot, cold := w.heldBy("hot"), w.heldBy("cold"); hot != 0 || cold != 0 || w.n.Load() != 0 {
		t.Errorf("after every release: %d and %d places of the keys, %d of the handler held, want none", hot, cold, w.n.Load())
	}
	w.sweep()
	keys := 0
	w.byKey.Range(func(any, any) bool { keys++; return true })
	if keys != 0 {
		t.Errorf("after a sweep: %d keys kept, want none (no place held)", keys)
	}
	if p, _ := w.take(reqsOf("hot")); p.w == nil || w.heldBy("hot") != 1 {
		t.Errorf("hot key after a sweep: got place %v and %d held, want a place", p.w != nil, w.heldBy("hot"))
	} else {
		p.release()
	}
}

// TestServeHTTPMaxDelayWaitingPerKey: a key holds at most its bound of a
// handler's places (2 here). At 1/s with burst 1 and max_delay 1m, key a's
// first request passes and the next two wait; past the bound, a's requests
// that would wait are rejected with Retry-After as if their wait were too
// long, consuming nothing (both see the turn after a's two reservations),
// while key b's requests still wait, the handler's bound far off.
func TestServeHTTPMaxDelayWaitingPerKey(t *testing.T) {
	const bound = 2
	h := newHandler(t, rateLimit(zoneCfg(uniqueZone("delay-key"), "key {http.request.header.X-Key}",
		"algorithm token_bucket", "events 60", "window 1m", "burst 1", "max_delay 1m")))
	h.waiting.perKey = bound
	waits := h.zones[0].delay.waits
	var ws waiters
	defer ws.end()
	for _, key := range []string{"a", "b"} {
		if res := serve(t, h, reqOpts{headers: map[string]string{"X-Key": key}}); !res.allowed() {
			t.Fatalf("key %s, first request: got err %v, want passed on at once", key, res.err)
		}
	}
	for i := range bound {
		ws.start(h, "a")
		waitFor(t, fmt.Sprintf("key a's request %d to wait", i+2), func() bool { return sampleCount(t, waits) == uint64(i+1) })
	}
	for i := range 2 {
		res := serve(t, h, reqOpts{headers: map[string]string{"X-Key": "a"}})
		wantDenied(t, res, http.StatusTooManyRequests)
		if got, want := retryAfter(t, res), int64(bound+1); got != want {
			t.Errorf("key a over its bound, request %d: Retry-After got %d, want %d (its turn after the %d reservations; the rejection took none)", i, got, want, bound)
		}
	}
	ws.start(h, "b")
	waitFor(t, "key b's request to wait", func() bool { return sampleCount(t, waits) == bound+1 })
	if got, want := h.waiting.n.Load(), int64(bound+1); got != want {
		t.Errorf("requests waiting: got %d, want %d", got, want)
	}
}

// TestMaxDelayFloodCached: while a key is denied, its flood costs Redis one
// call, whether or not its requests find a place among the waiting (here
// the handler's places are full for every other request, as when other
// keys' waiters come and go): a cached denial is looked up before a place
// is taken, and answers the request with or without its max_delay.
func TestMaxDelayFloodCached(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	h := newHandler(t, rateLimit(block("redis", "url "+srv.URL()),
		zoneCfg(uniqueZone("delay-flood"), "key k", "algorithm token_bucket", "events 1", "window 1m", "burst 1", "max_delay 1s")))
	waitSubscribed(t, h)
	if res := serve(t, h, reqOpts{}); !res.allowed() { // connects, loads the library
		t.Fatalf("first request: got err %v, want passed on", res.err)
	}
	calls := func() int64 { // Functions, or EVALSHA on Redis 6
		info := redistest.ReadInfo(t, rdb, "commandstats")
		return info.Stat("cmdstat_fcall", "calls") + info.Stat("cmdstat_evalsha", "calls") + info.Stat("cmdstat_eval", "calls")
	}
	before := calls()
	const flood = 20
	for i := range flood {
		h.waiting.limit = defaultMaxWaiting
		if i%2 == 1 {
			h.waiting.limit = 0 // full: this request may not wait
		}
		wantDenied(t, serve(t, h, reqOpts{}), http.StatusTooManyRequests)
	}
	if got, want := calls()-before, int64(1); got != want {
		t.Errorf("Redis calls for a flood of %d denied requests: got %d, want %d (the first denial, then the deny cache)", flood, got, want)
	}
	if got := h.waiting.n.Load(); got != 0 {
		t.Errorf("places held after the flood: got %d, want 0", got)
	}
}

// TestWaitPlacePerKeyConcurrent: under takes, releases and sweeps at once,
// a key never holds more than its bound of places, and every place given
// back is freed.
func TestWaitPlacePerKeyConcurrent(t *testing.T) {
	const perKey, workers, rounds = 3, 8, 2000
	w := &waiting{limit: defaultMaxWaiting, perKey: perKey, logger: zap.NewNop()}
	reqs := []algorithms.Request{{Key: "hot", Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1, Window: time.Second, MaxDelay: time.Second}}}
	var holders, most atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() { // sweeps all along
		for {
			select {
			case <-stop:
				return
			default:
				w.sweep()
			}
		}
	}()
	for range workers {
		wg.Go(func() {
			for range rounds {
				mine := slices.Clone(reqs)
				p, _ := w.take(mine)
				if p.w != nil {
					n := holders.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					holders.Add(-1)
				}
				p.release()
			}
		})
	}
	wg.Wait()
	close(stop)
	if got := most.Load(); got > perKey || got == 0 {
		t.Errorf("most places of the key held at once: got %d, want 1 to %d", got, perKey)
	}
	if got := w.heldBy("hot"); got != 0 || w.n.Load() != 0 {
		t.Errorf("after every release: %d places of the key, %d of the handler, want none", got, w.n.Load())
	}
}

// waiters are requests a test sends a handler in goroutines of their own,
// where max_delay may hold them; each ends when its client leaves.
type waiters struct {
	cancels []context.CancelFunc
	done    []chan error
}

// start sends h a request with X-Key key (none when key is "").
func (ws *waiters) start(h *Handler, key string) {
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "http://example.com/api", nil)
	if key != "" {
		req.Header.Set("X-Key", key)
	}
	rec := httptest.NewRecorder()
	req = caddyhttp.PrepareRequest(req, caddy.NewReplacer(), rec, nil)
	end := make(chan error, 1)
	go func() {
		end <- h.ServeHTTP(rec, req, caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil }))
	}()
	ws.cancels, ws.done = append(ws.cancels, cancel), append(ws.done, end)
}

// leave makes the first request's client leave, and returns what its
// handler returned.
func (ws *waiters) leave() error {
	ws.cancels[0]()
	err := <-ws.done[0]
	ws.cancels, ws.done = ws.cancels[1:], ws.done[1:]
	return err
}

// end makes every client left leave, and waits for its handler to return.
func (ws *waiters) end() {
	for len(ws.cancels) > 0 {
		_ = ws.leave()
	}
}
