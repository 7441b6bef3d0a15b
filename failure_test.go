package sluice

import (
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
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
