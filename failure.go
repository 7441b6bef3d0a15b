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

// How store failures are logged: each handler at most once per interval
// per cause, each line with the requests failure_mode decided since the
// handler's previous line; each Redis once when it answers again, with the
// requests failure_mode decided while it failed. A flapping Redis logs no
// more often: a cause's interval runs across outages, and a recovery
// within the interval of the last recovery line waits for the interval's
// end. What a handler decides while Redis fails (failure_mode) is the
// backend's.

// failureLog logs a handler's store failures at most once per interval per
// cause, with the failure mode in force and how many requests failure_mode
// decided since the handler's previous line (or since its Redis last
// answered, whichever is later: the recovery line counts those before).
// Its Redis's outage (outageLog) counts them too, and logs the recovery
// once for every handler on that Redis.
type failureLog struct {
	logger   *zap.Logger
	mode     string
	outage   *outageLog // shared by the handlers on one Redis
	interval time.Duration

	mu       sync.Mutex
	due      map[string]time.Time // when each cause may log again; kept across outages
	requests int                  // decided by failure_mode since the last line or recovery
	failing  atomic.Bool          // read without mu on every success
}

func newFailureLog(logger *zap.Logger, mode string, outage *outageLog) *failureLog {
	return &failureLog{logger: logger, mode: mode, outage: outage, interval: logInterval, due: make(map[string]time.Time)}
}

// record counts a request failure_mode decides at now, after err, and logs
// the failure when its cause's interval has passed.
func (f *failureLog) record(now time.Time, err error) {
	name := cause(err)
	f.outage.failed(now)
	f.mu.Lock()
	f.failing.Store(true)
	f.requests++
	if due, ok := f.due[name]; ok && now.Before(due) {
		f.mu.Unlock()
		return
	}
	f.due[name] = now.Add(f.interval)
	n := f.requests
	f.requests = 0
	f.mu.Unlock()
	f.logger.Error("rate limit store failed; failure_mode decides",
		zap.String("cause", name), zap.Error(err),
		zap.String("failure_mode", f.mode), zap.Int("requests", n))
}

// recovered ends the handler's outage, whose requests its Redis's recovery
// line counts, and its Redis's outage, which logs that line.
func (f *failureLog) recovered() {
	if f.failing.Load() {
		f.mu.Lock()
		if f.failing.Swap(false) {
			f.requests = 0
		}
		f.mu.Unlock()
	}
	f.outage.recovered()
}

// outageLog logs, once per outage of one Redis, that it answers again,
// with the requests failure_mode decided meanwhile: one line however many
// handlers share the Redis. Lines are at least interval apart: a recovery
// sooner after the last line is held until the interval ends, and logged
// then if Redis still answers (else the outage that began meanwhile logs
// it with its own), so that a flapping Redis logs one line per interval,
// saying how many outages it stands for.
type outageLog struct {
	logger   *zap.Logger
	redis    string // its metrics label
	interval time.Duration

	failing  atomic.Bool
	requests atomic.Int64 // decided by failure_mode since the last line

	mu      sync.Mutex
	began   time.Time   // when the first outage since the last line began
	outages int         // outages since the last line
	next    time.Time   // the least time of the next line
	held    *time.Timer // logs a held recovery at next; nil when none is held
}

func newOutageLog(logger *zap.Logger, redis string) *outageLog {
	return &outageLog{logger: logger, redis: redis, interval: logInterval}
}

// failed counts a request failure_mode decides at now, and starts an
// outage unless one is in progress.
func (o *outageLog) failed(now time.Time) {
	o.requests.Add(1)
	if o.failing.Load() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failing.Load() {
		return
	}
	if o.outages == 0 {
		o.began = now
	}
	o.outages++
	o.failing.Store(true)
}

// recovered ends the outage in progress, if any, and logs it, or holds its
// line until the interval since the last one ends. On every success: a
// load when there is no outage.
func (o *outageLog) recovered() {
	if !o.failing.Load() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.failing.Swap(false) {
		return
	}
	now := time.Now()
	if wait := o.next.Sub(now); wait > 0 {
		if o.held == nil {
			o.held = time.AfterFunc(wait, o.logHeld)
		}
		return
	}
	o.logAt(now)
}

// logHeld logs the recovery held back, unless Redis fails again.
func (o *outageLog) logHeld() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.held = nil
	if !o.failing.Load() && o.outages > 0 {
		o.logAt(time.Now())
	}
}

// stop logs a recovery held back now, as its Redis client closes.
func (o *outageLog) stop() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held == nil || !o.held.Stop() {
		return
	}
	o.held = nil
	if !o.failing.Load() && o.outages > 0 {
		o.logAt(time.Now())
	}
}

// logAt logs the outages since the last line as ended at now; mu is held.
func (o *outageLog) logAt(now time.Time) {
	o.logger.Info("rate limit store recovered; failure_mode no longer decides",
		zap.String("redis", o.redis), zap.Int64("requests", o.requests.Swap(0)),
		zap.Int("outages", o.outages), zap.Duration("duration", now.Sub(o.began)))
	o.outages = 0
	o.next = now.Add(o.interval)
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
