package sluice

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// The failure modes: what to do with a request while Redis fails.
const (
	failOpen   = "open"
	failClosed = "closed"
	failLocal  = "local"
)

// localFallback decides while Redis fails, under failure_mode local, with
// this instance's in-memory counters. It is apart from memoryStore, and an
// outage starts from fresh counters: the first failure after a success
// swaps in a new store, so counts of an earlier outage do not carry over.
// One per Redis client, shared by the handlers that share the client.
type localFallback struct {
	store   atomic.Pointer[algorithms.MemoryStore]
	failing atomic.Bool
}

func newLocalFallback() *localFallback {
	l := new(localFallback)
	l.store.Store(algorithms.NewMemoryStore())
	return l
}

// failed returns the store that decides during the outage in progress,
// fresh when this failure starts the outage.
func (l *localFallback) failed() *algorithms.MemoryStore {
	if l.failing.CompareAndSwap(false, true) {
		l.store.Store(algorithms.NewMemoryStore())
	}
	return l.store.Load()
}

// succeeded ends the outage in progress, if any.
func (l *localFallback) succeeded() {
	if l.failing.Load() {
		l.failing.Store(false)
	}
}

// reset starts key over in the local counters, as the admin API's DELETE
// does in Redis.
func (l *localFallback) reset(key string) {
	_ = l.store.Load().Reset(context.Background(), key) // the memory store never fails
}

// failureLogInterval is the least time between two logs of one cause of
// Redis failure, so an outage logs a line per interval, not per request.
const failureLogInterval = 10 * time.Second

// fallback decides a request that the store failed to decide, by
// failure_mode: decisions from the local store, or none with no error to
// admit it, or an error that answers 503.
func (h *Handler) fallback(zones []*Zone, reqs []algorithms.Request, err error) ([]algorithms.Decision, error) {
	h.failures.record(err)
	switch h.FailureMode {
	case failClosed:
		h.countFailed(zones, outcomeFailedClosed)
		return nil, caddyhttp.Error(http.StatusServiceUnavailable, err)
	case failLocal:
		ds := h.backend.local.failed().AllowAt(time.Now(), reqs)
		h.count(zones, ds, true)
		return ds, nil
	}
	h.countFailed(zones, outcomeFailedOpen)
	return nil, nil
}

// cause names the kind of a store failure, for logs and metrics.
func cause(err error) string {
	var netErr net.Error
	msg := err.Error()
	switch {
	case errors.Is(err, errCircuitOpen):
		return "circuit_open"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	case strings.Contains(msg, "OOM"):
		return "out_of_memory"
	case strings.Contains(msg, "connection refused"), strings.Contains(msg, "EOF"), strings.Contains(msg, "connection reset"):
		return "connection"
	case strings.Contains(msg, "LOADING"), strings.Contains(msg, "READONLY"), strings.Contains(msg, "CLUSTERDOWN"), strings.Contains(msg, "MASTERDOWN"):
		return "unavailable"
	}
	return "other"
}

// failureLog logs store failures at most once per interval per cause, with
// the failure mode in force and how many requests it decided since the
// cause's last line; and the recovery, once.
type failureLog struct {
	logger *zap.Logger
	mode   string

	mu      sync.Mutex
	causes  map[string]*causeLog
	failing atomic.Bool // read without mu on every success
}

type causeLog struct {
	last    time.Time
	decided int
}

func newFailureLog(logger *zap.Logger, mode string) *failureLog {
	return &failureLog{logger: logger, mode: mode, causes: make(map[string]*causeLog)}
}

func (f *failureLog) record(err error) {
	name := cause(err)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing.Store(true)
	c, ok := f.causes[name]
	if !ok {
		c = new(causeLog)
		f.causes[name] = c
	}
	c.decided++
	if time.Since(c.last) < failureLogInterval {
		return
	}
	f.logger.Error("rate limit store failed; failure_mode decides",
		zap.String("cause", name), zap.Error(err),
		zap.String("failure_mode", f.mode), zap.Int("requests", c.decided))
	c.last, c.decided = time.Now(), 0
}

// recovered logs, once per outage, that the store answers again.
func (f *failureLog) recovered() {
	if !f.failing.Load() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.failing.Swap(false) {
		return
	}
	clear(f.causes)
	f.logger.Info("rate limit store recovered", zap.String("failure_mode", f.mode))
}
