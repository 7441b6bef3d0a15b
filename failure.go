package sluice

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// How store failures are named, for logs and metrics, and logged: at
// most once per interval per cause. What a handler decides while Redis
// fails (failure_mode) is the backend's.

// callCauses are the causes a Redis call can fail with, as cause names
// them (circuit_open is no call).
var callCauses = []string{"timeout", "out_of_memory", "connection", "unavailable", "other"}

// cause names the kind of a store failure, for logs and metrics, with
// go-redis's own error helpers where they exist (they see errors raised
// inside a script too: "OOM ... script: ...").
func cause(err error) string {
	var netErr net.Error
	var opErr *net.OpError
	switch {
	case errors.Is(err, algorithms.ErrCircuitOpen):
		return "circuit_open"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	case redis.IsOOMError(err), oomInScript(err):
		return "out_of_memory"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.As(err, &opErr):
		return "connection"
	case redis.IsLoadingError(err), redis.IsReadOnlyError(err), redis.IsClusterDownError(err),
		redis.IsMasterDownError(err), redis.IsTryAgainError(err):
		return "unavailable"
	}
	return "other"
}

// oomInScript reports Redis 6's word for an out-of-memory error raised by a
// write inside a script: "ERR @user_script: 76: -OOM command not allowed
// ..." (Redis 7 and Valkey answer "OOM ...", which redis.IsOOMError sees).
func oomInScript(err error) bool {
	return err != nil && strings.Contains(err.Error(), "-OOM command not allowed")
}

// failureLog logs store failures at most once per logInterval per cause,
// with the failure mode in force and how many requests it decided since
// the cause's last line; and the recovery, once.
type failureLog struct {
	logger *zap.Logger
	mode   string

	mu      sync.Mutex
	causes  map[string]*throttle
	failing atomic.Bool // read without mu on every success
}

func newFailureLog(logger *zap.Logger, mode string) *failureLog {
	return &failureLog{logger: logger, mode: mode, causes: make(map[string]*throttle)}
}

func (f *failureLog) record(now time.Time, err error) {
	name := cause(err)
	f.mu.Lock()
	f.failing.Store(true)
	t, ok := f.causes[name]
	if !ok {
		t = &throttle{interval: logInterval}
		f.causes[name] = t
	}
	f.mu.Unlock()
	if n, ok := t.tickAt(now); ok {
		f.logger.Error("rate limit store failed; failure_mode decides",
			zap.String("cause", name), zap.Error(err),
			zap.String("failure_mode", f.mode), zap.Int("requests", n))
	}
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
