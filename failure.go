package sluice

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// How store failures are logged: at most once per interval per cause
// (named by cause, with the Redis backend). What a handler decides while
// Redis fails (failure_mode) is the backend's.

// failureLog logs a handler's store failures at most once per logInterval
// per cause, with the failure mode in force and how many requests it
// decided since the cause's last line; its Redis's outage logs the
// recovery, once for every handler on that Redis.
type failureLog struct {
	logger *zap.Logger
	mode   string
	outage *outageLog // shared by the handlers on one Redis

	mu      sync.Mutex
	causes  map[string]*throttle
	failing atomic.Bool // read without mu on every success
}

func newFailureLog(logger *zap.Logger, mode string, outage *outageLog) *failureLog {
	return &failureLog{logger: logger, mode: mode, outage: outage, causes: make(map[string]*throttle)}
}

func (f *failureLog) record(now time.Time, err error) {
	name := cause(err)
	f.outage.failed()
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

// recovered ends the handler's outage, so that the next failure of each
// cause is logged at once, and its Redis's, which logs the recovery.
func (f *failureLog) recovered() {
	if !f.failing.Load() {
		return
	}
	f.outage.recovered()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing.Swap(false) {
		clear(f.causes)
	}
}

// outageLog logs, once per outage of one Redis, that it answers again:
// one line however many handlers share the Redis.
type outageLog struct {
	logger  *zap.Logger
	redis   string // its metrics label
	failing atomic.Bool
}

func (o *outageLog) failed() { o.failing.Store(true) }

func (o *outageLog) recovered() {
	if o.failing.Load() && o.failing.Swap(false) {
		o.logger.Info("rate limit store recovered", zap.String("redis", o.redis))
	}
}

// failurePolicy decides the requests the store failed to decide, by
// failure_mode, and logs the failures.
type failurePolicy struct {
	mode  string
	local *localFallback // nil without Redis
	log   *failureLog
}

// decide decides v by the failure mode, and notes the mode in v (the
// observer counts and traces it); see redisBackend.decide.
func (p failurePolicy) decide(v *verdict, err error) error {
	skewed := algorithms.IsClockSkew(err) // no outage: logged apart
	if skewed {
		logClockSkew(p.log.logger, p.mode, err)
	} else {
		p.log.record(time.Now(), err)
	}
	switch p.mode {
	case failClosed:
		v.failed = failClosed
		v.place.release() // refused: it never waits
		return caddyhttp.Error(http.StatusServiceUnavailable, err)
	case failLocal:
		v.ds, v.failed = p.local.during(skewed).AllowAt(time.Now(), v.reqs), failLocal
		v.denied = !algorithms.Admitted(v.reqs, v.ds)
		v.settles = !v.denied && algorithms.Settles(v.reqs)
		v.place.keepDelayed(v.ds, v.denied) // as deciding.decided does
		return nil
	}
	v.failed = failOpen
	v.place.release() // passed on undecided: it never waits
	return nil
}

// succeeded ends the outage in progress, if any.
func (p failurePolicy) succeeded() {
	if p.local != nil {
		p.local.succeeded()
	}
	p.log.recovered()
}

// localFallback decides while Redis fails, under failure_mode local, with
// this instance's in-memory counters. It is apart from memoryStore, and an
// outage starts from fresh counters: the first failure after a success
// swaps in a new store, so counts of an earlier outage do not carry over.
// One per Redis client, shared by the handlers that share the client.
type localFallback struct {
	store   atomic.Pointer[algorithms.MemoryStore]
	failing atomic.Bool
	mu      sync.Mutex // held to start an outage
}

func newLocalFallback() *localFallback {
	l := new(localFallback)
	l.store.Store(algorithms.NewMemoryStore())
	return l
}

// failed returns the store that decides during the outage in progress,
// fresh when this failure starts the outage.
func (l *localFallback) failed() *algorithms.MemoryStore {
	if !l.failing.Load() {
		l.mu.Lock()
		if !l.failing.Load() { // the fresh store is in before anyone sees failing
			l.store.Store(algorithms.NewMemoryStore())
			l.failing.Store(true)
		}
		l.mu.Unlock()
	}
	return l.store.Load()
}

// during returns the store that decides a failed request: failed's, or
// for a request refused as clock skew (no outage: other requests still
// reach Redis, and would start a fresh store at each) the current one.
func (l *localFallback) during(skewed bool) *algorithms.MemoryStore {
	if skewed {
		return l.current()
	}
	return l.failed()
}

// succeeded ends the outage in progress, if any.
func (l *localFallback) succeeded() {
	if l.failing.Load() {
		l.failing.Store(false)
	}
}

// current is the store of the outage in progress, or of the last one: the
// store that decided a request settles it.
func (l *localFallback) current() *algorithms.MemoryStore {
	return l.store.Load()
}

// reset starts key over in the local counters, as the admin API's DELETE
// does in Redis.
func (l *localFallback) reset(key string) {
	_ = l.store.Load().Reset(context.Background(), key) // the memory store never fails
}
