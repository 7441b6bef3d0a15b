package sluice

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// failureLines and recoveryLines are the messages of failure.go's logs.
const (
	failureLine  = "rate limit store failed; failure_mode decides"
	recoveryLine = "rate limit store recovered; failure_mode no longer decides"
)

// observeFailures sends h's failure and recovery logs to a fresh observer.
func observeFailures(t *testing.T, h *Handler) *observer.ObservedLogs {
	t.Helper()
	b, ok := h.backend.(*redisBackend)
	if !ok {
		t.Fatalf("backend %T, want a redisBackend", h.backend)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	b.failure.log.logger = zap.New(core)
	b.failure.log.outage.mu.Lock()
	b.failure.log.outage.logger = zap.New(core)
	b.failure.log.outage.mu.Unlock()
	return logs
}

// sumRequests adds the "requests" field of lines.
func sumRequests(lines []observer.LoggedEntry) int64 {
	var n int64
	for _, l := range lines {
		n += l.ContextMap()["requests"].(int64)
	}
	return n
}

// TestFailureLogCountsRequests: while Redis is down, the failure lines
// count every request failure_mode decided (each since the line before),
// not one per line; when Redis answers again, one recovery line says how
// many it decided in all.
func TestFailureLogCountsRequests(t *testing.T) {
	srv := redistest.Start(t)
	zone := uniqueZone("fail-count")
	h := newHandler(t, rateLimit(block("redis", "url "+srv.URL(), "timeout 100ms"), logZone(zone, 1000, "1h")))
	if res := serve(t, h, reqOpts{}); res.header("RateLimit") == "" {
		t.Fatalf("with Redis up: no RateLimit field (err %v)", res.err)
	}
	logs := observeFailures(t, h)
	srv.Stop()
	failed := int64(0)
	for range 200 {
		res := serve(t, h, reqOpts{})
		if !res.allowed() || res.header("RateLimit") != "" {
			t.Fatalf("with Redis down: allowed %v, RateLimit %q; want failure_mode open", res.allowed(), res.header("RateLimit"))
		}
		failed++
	}
	lines := logs.FilterMessage(failureLine).All()
	if len(lines) == 0 || len(lines) > 3 { // at most one per cause: connection, then circuit_open, maybe timeout
		t.Fatalf("failure lines: got %d, want 1 to 3: %v", len(lines), lines)
	}
	if got := sumRequests(lines); got < 1 || got > failed {
		t.Errorf("failure lines' requests: got %d in all, want 1 to %d", got, failed)
	}
	srv.Restart(t)
	deadline := time.Now().Add(10 * time.Second)
	for serve(t, h, reqOpts{}).header("RateLimit") == "" { // decided by failure_mode until Redis answers
		if time.Now().After(deadline) {
			t.Fatal("Redis never answered after its restart")
		}
		failed++
		time.Sleep(10 * time.Millisecond)
	}
	recovered := logs.FilterMessage(recoveryLine).All()
	if len(recovered) != 1 {
		t.Fatalf("recovery lines: got %d, want 1: %v", len(recovered), logs.All())
	}
	fields := recovered[0].ContextMap()
	if got := fields["requests"]; got != failed {
		t.Errorf("recovery line's requests: got %v, want %d (every request failure_mode decided)", got, failed)
	}
	if got, want := fields["outages"], int64(1); got != want {
		t.Errorf("recovery line's outages: got %v, want %v", got, want)
	}
	if got, want := fields["redis"], srv.Addr; got != want {
		t.Errorf("recovery line's redis: got %v, want %v", got, want)
	}
}

// TestFailureLogFlapping: a Redis that fails and answers again and again
// within one interval logs one failure line per cause and one recovery
// line per interval, and the held recovery line counts what the lines
// before it did not.
func TestFailureLogFlapping(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	logger := zap.New(core)
	outage := newOutageLog(logger, "flapping")
	outage.interval = 300 * time.Millisecond
	log := newFailureLog(logger, failOpen, outage)
	refused := fmt.Errorf("dial tcp: %w", syscall.ECONNREFUSED)
	for flap := range 3 {
		for range 5 {
			log.record(time.Now(), refused)
		}
		log.recovered()
		if flap == 0 {
			log.record(time.Now(), errors.New("NOSUCH other error")) // another cause: its own line
			log.recovered()
		}
	}
	failures := logs.FilterMessage(failureLine).All()
	if got, want := len(failures), 2; got != want {
		t.Fatalf("failure lines over three outages in an interval: got %d, want %d (one per cause): %v", got, want, failures)
	}
	if got, want := failures[0].ContextMap()["requests"], int64(1); got != want {
		t.Errorf("first failure line's requests: got %v, want %v", got, want)
	}
	recovered := logs.FilterMessage(recoveryLine).All()
	if len(recovered) != 1 {
		t.Fatalf("recovery lines at once: got %d, want 1 (the next is held for the interval): %v", len(recovered), recovered)
	}
	if got, want := recovered[0].ContextMap()["requests"], int64(5); got != want {
		t.Errorf("first recovery line's requests: got %v, want %v", got, want)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(logs.FilterMessage(recoveryLine).All()) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the held recovery line was never logged")
		}
		time.Sleep(10 * time.Millisecond)
	}
	recovered = logs.FilterMessage(recoveryLine).All()
	if d := recovered[1].Time.Sub(recovered[0].Time); d < outage.interval-10*time.Millisecond {
		t.Errorf("recovery lines %v apart, want at least the interval %v", d, outage.interval)
	}
	fields := recovered[1].ContextMap()
	if got, want := fields["requests"], int64(11); got != want {
		t.Errorf("held recovery line's requests: got %v, want %v (the outages after the first line)", got, want)
	}
	if got, want := fields["outages"], int64(3); got != want {
		t.Errorf("held recovery line's outages: got %v, want %v", got, want)
	}
	time.Sleep(2 * outage.interval)
	if got := len(logs.FilterMessage(recoveryLine).All()); got != 2 {
		t.Errorf("recovery lines once Redis stays up: got %d, want 2", got)
	}
}
