package sluice

import (
	"net/http"
	"sync"
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

// localStore decides while Redis fails, under failure_mode local. It is
// apart from memoryStore so that an outage starts from fresh counters.
var localStore = algorithms.NewMemoryStore()

// failureLogInterval is the least time between two logs of Redis failures,
// so an outage logs a line per interval, not one per request.
const failureLogInterval = 10 * time.Second

// fallback decides a request that the store failed to decide, by
// failure_mode: decisions from the local store, or none with no error to
// admit it, or an error that answers 503.
func (h *Handler) fallback(reqs []algorithms.Request, err error) ([]algorithms.Decision, error) {
	h.failures.record(err)
	switch h.FailureMode {
	case failClosed:
		return nil, caddyhttp.Error(http.StatusServiceUnavailable, err)
	case failLocal:
		return localStore.AllowAt(time.Now(), reqs), nil
	}
	return nil, nil
}

// failureLog logs store failures at most once per interval, with how many
// requests failed since the last line.
type failureLog struct {
	logger *zap.Logger
	mode   string

	mu     sync.Mutex
	last   time.Time
	missed int
}

func newFailureLog(logger *zap.Logger, mode string) *failureLog {
	return &failureLog{logger: logger, mode: mode}
}

func (f *failureLog) record(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.missed++
	if time.Since(f.last) < failureLogInterval {
		return
	}
	f.logger.Error("rate limit store failed; applying failure_mode",
		zap.Error(err), zap.String("failure_mode", f.mode), zap.Int("requests", f.missed))
	f.last, f.missed = time.Now(), 0
}
