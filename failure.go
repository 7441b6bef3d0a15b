package sluice

import (
	"net/http"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// The failure modes: what to do with a request while Redis fails.
const (
	failOpen   = "open"
	failClosed = "closed"
)

// failureLogInterval is the least time between two logs of Redis failures,
// so an outage logs a line per interval, not one per request.
const failureLogInterval = 10 * time.Second

// fail decides a request that the store could not decide.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, err error) error {
	h.failures.record(err)
	if h.FailureMode == failClosed {
		return caddyhttp.Error(http.StatusServiceUnavailable, err)
	}
	return next.ServeHTTP(w, r)
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
