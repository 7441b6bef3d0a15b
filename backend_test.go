package sluice

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// Tests of what the handler does while Redis fails: failure_mode, and the
// circuit breaker that spares requests the timeout.

// closedPort is a local address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestServeHTTPFailureMode(t *testing.T) {
	type step struct {
		allowed bool
		status  int // when denied
	}
	tests := []struct {
		mode  string
		steps []step
	}{
		{"open", []step{{true, 0}, {true, 0}, {true, 0}, {true, 0}}},
		{"closed", []step{{false, http.StatusServiceUnavailable}, {false, http.StatusServiceUnavailable}}},
		{"local", []step{{true, 0}, {true, 0}, {false, http.StatusTooManyRequests}, {false, http.StatusTooManyRequests}}},
	}
	addr := closedPort(t)
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			zone := uniqueZone("fail-" + tt.mode)
			h := newHandler(t, rateLimit(
				block("redis", "url redis://"+addr, "timeout 50ms"),
				"failure_mode "+tt.mode,
				logZone(zone, 2, "1h"),
			))
			for i, s := range tt.steps {
				res := serve(t, h, reqOpts{})
				if got := res.allowed(); got != s.allowed {
					t.Errorf("request %d: allowed = %v (err %v), want %v", i, got, res.err, s.allowed)
					continue
				}
				if !s.allowed {
					if got := res.status(); got != s.status {
						t.Errorf("request %d: error %v (status %d), want status %d", i, res.err, got, s.status)
					}
					if res.next != 0 {
						t.Errorf("request %d: next called on a denied request", i)
					}
				}
				if tt.mode == "local" {
					if got, want := remaining(t, res, zone), max(0, int64(1-i)); got != want {
						t.Errorf("request %d: r = %d, want %d (local counters)", i, got, want)
					}
				}
			}
		})
	}
}

// TestServeHTTPCircuitBreaker checks that a Redis that never answers does
// not cost the timeout on every request: with a breaker open, most requests
// never reach Redis. The server below accepts connections and reads, but
// never replies.
func TestServeHTTPCircuitBreaker(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	var conns atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						c.Close()
						return
					}
				}
			}()
		}
	}()
	zone := uniqueZone("breaker")
	h := newHandler(t, rateLimit(
		block("redis", fmt.Sprintf("url redis://%s", l.Addr()), "timeout 20ms"),
		zoneCfg(zone, "key {http.request.remote.host}", "events 5", "window 1m"),
	))
	const requests = 30
	for i := range requests {
		if res := serve(t, h, reqOpts{}); !res.allowed() {
			t.Fatalf("request %d: err %v; want allowed (failure_mode open)", i, res.err)
		}
	}
	if got := conns.Load(); got > requests/2 {
		t.Errorf("Redis connections over %d requests to a hung Redis: %d; want a circuit breaker to spare most of them", requests, got)
	}
}

// TestLocalFallbackFreshPerOutage: under failure_mode local, each outage
// starts from fresh local counters (the last outage's do not carry over),
// and the admin API's reset reaches the local counters too.
func TestLocalFallbackFreshPerOutage(t *testing.T) {
	srv := redistest.Start(t)
	zone := uniqueZone("local-fresh")
	h := newHandler(t, fmt.Sprintf(`rate_limit {
		redis {
			url %s
			timeout 200ms
		}
		failure_mode local
		zone %s {
			key {http.request.remote.host}
			algorithm sliding_log
			events 2
			window 1h
		}
	}`, srv.URL(), zone))
	allowed := func(t *testing.T, want ...bool) {
		t.Helper()
		for i, w := range want {
			if got := serve(t, h, reqOpts{}).allowed(); got != w {
				t.Errorf("request %d of the outage: allowed = %v, want %v", i, got, w)
			}
		}
	}

	srv.Stop()
	allowed(t, true, true, false) // the local limit holds during the outage
	reg, ok := lookupZone(zone)
	if !ok {
		t.Fatal("zone not registered")
	}
	_ = reg.reset(context.Background(), "192.0.2.1") // Redis is down: only the local reset can succeed
	allowed(t, true)

	srv.Restart(t)
	deadline := time.Now().Add(10 * time.Second)
	for h.backend.shared().local.failing.Load() { // until Redis answers a request again
		if time.Now().After(deadline) {
			t.Fatal("Redis never answered after its restart")
		}
		serve(t, h, reqOpts{})
	}

	srv.Stop()
	allowed(t, true, true, false) // fresh counters at the second outage's start
}

// TestUndecidedSlotReleased: a decision whose answer is lost (here the
// timeout passes while Redis is busy in DEBUG SLEEP) may
// still run in Redis and take a concurrency slot; the handler gives it
// back, so the key's slot does not stay taken for the zone's window.
func TestUndecidedSlotReleased(t *testing.T) {
	srv := redistest.Start(t, "--enable-debug-command", "yes")
	rdb := srv.Client(t)
	ctx := context.Background()
	zone := uniqueZone("undecided")
	h := newHandler(t, fmt.Sprintf("rate_limit {\n\tredis {\n\t\turl redis://%s\n\t\ttimeout 50ms\n\t}\n\tzone %s {\n\t\tkey k\n\t\talgorithm concurrency\n\t\tevents 1\n\t}\n}", srv.Addr, zone))
	if res := serveNext(t, h, respondWith(http.StatusOK)); res.next != 1 { // connects, loads the library
		t.Fatalf("first request: got %d calls of next, want 1 (err %v)", res.next, res.err)
	}
	calls := func() int64 { // Functions, or EVALSHA on Redis 6
		info := redistest.ReadInfo(t, rdb, "commandstats")
		return info.Stat("cmdstat_fcall", "calls") + info.Stat("cmdstat_evalsha", "calls") + info.Stat("cmdstat_eval", "calls")
	}
	before := calls()
	go func() { _ = srv.Client(t).Do(ctx, "DEBUG", "SLEEP", "0.4").Err() }()
	busy := time.Now().Add(5 * time.Second)
	probe := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer probe.Close()
	for { // until Redis sleeps: a PING no longer answers in time
		pingCtx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		err := probe.Ping(pingCtx).Err()
		cancel()
		if err != nil {
			break
		}
		if time.Now().After(busy) {
			t.Fatal("Redis never went to sleep")
		}
	}
	if res := serveNext(t, h, respondWith(http.StatusOK)); res.next != 1 { // failure_mode open
		t.Fatalf("request while Redis sleeps: got %d calls of next, want 1 (err %v)", res.next, res.err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for calls() < before+1 { // the lost decision ran once Redis woke
		if time.Now().After(deadline) {
			t.Fatal("the paused decision never ran")
		}
		time.Sleep(10 * time.Millisecond)
	}
	settling.Wait()
	key := h.zones[0].storeKey("k")
	// slots are scored by their expiry; a release that reached Redis
	// before its slot leaves a tombstone, scored below 0, never counted
	if n, err := rdb.ZCount(ctx, key, "0", "+inf").Result(); err != nil || n != 0 {
		t.Errorf("slots of %s after the lost decision: got %d (%v), want 0", key, n, err)
	}
}

// outageTurn is a middleware that, while its request is being served,
// ends the failure_mode local outage in progress and starts a new one,
// as Redis coming back and failing again would.
type outageTurn struct{ local *localFallback }

func (o outageTurn) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	o.local.succeeded()
	o.local.failed()
	return next.ServeHTTP(w, r)
}

// TestSettlementGoesToTheDecidingStore: under failure_mode local, a
// request settles on the local store that decided it, even when an outage
// ended and another began (with fresh counters) while it was served: its
// slot is given back there, not to the new outage's store.
func TestSettlementGoesToTheDecidingStore(t *testing.T) {
	srv := redistest.Start(t)
	zone := uniqueZone("local-settle")
	h := newHandler(t, rateLimit(
		block("redis", "url "+srv.URL(), "timeout 200ms"),
		"failure_mode local",
		zoneCfg(zone, "key {http.request.remote.host}", "algorithm concurrency", "events 1", "window 1h"),
	))
	srv.Stop()
	local := h.backend.shared().local
	if !serve(t, h, reqOpts{}).allowed() { // starts the outage; its slot is released at once
		t.Fatal("first request of the outage: denied, want admitted")
	}
	settling.Wait()
	deciding := local.current()
	if res := serveStack(t, reqOpts{}, h, outageTurn{local}); !res.allowed() {
		t.Fatal("request across two outages: denied, want admitted")
	}
	settling.Wait()
	if deciding == local.current() {
		t.Fatal("no new outage began while the request was served")
	}
	req := algorithms.Request{Key: h.zones[0].storeKey("192.0.2.1"), Limit: h.zones[0].limit}
	ds, err := deciding.Peek(context.Background(), []algorithms.Request{req})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ds[0].Remaining, int64(1); got != want {
		t.Errorf("the deciding store after the settlement: remaining %d, want %d (its slot given back)", got, want)
	}
}
