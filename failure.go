package sluice

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// The failure path, in one place: what a handler decides while Redis
// fails (failure_mode), the local fallback, how failures are named and
// logged, and the circuit breakers' gauge. The breaker itself and its
// store decorator are in algorithms (Guard).

// The failure modes: what to do with a request while Redis fails.
const (
	failOpen   = "open"
	failClosed = "closed"
	failLocal  = "local"
)

// backend is where a handler's requests are decided: the store (on Redis,
// the chain algorithms.Guard builds: deny cache, breaker, Redis), the
// breaker whose state is the backend's health, and the local fallback of
// failure_mode local. breaker and local are nil for the memory store.
type backend struct {
	store   algorithms.InspectingStore
	breaker *algorithms.Breaker
	local   *localFallback
	server  *serverInfo // which Redis answers; nil for the memory store
	label   string      // the Redis's metrics label (redisLabel); "" in memory
}

// failurePolicy decides the requests the store failed to decide, by
// failure_mode, and logs the failures.
type failurePolicy struct {
	mode  string
	local *localFallback // nil without Redis
	log   *failureLog
}

// decide returns decisions from the local store, or none with no error to
// admit the request, or an error that answers 503.
func (p failurePolicy) decide(zones []*Zone, reqs []algorithms.Request, err error) ([]algorithms.Decision, error) {
	p.log.record(time.Now(), err)
	switch p.mode {
	case failClosed:
		countFailed(zones, outcomeFailedClosed)
		return nil, caddyhttp.Error(http.StatusServiceUnavailable, err)
	case failLocal:
		ds := p.local.failed().AllowAt(time.Now(), reqs)
		countLocal(zones)
		return ds, nil
	}
	countFailed(zones, outcomeFailedOpen)
	return nil, nil
}

// refuse answers a request that failure_mode closed refused: through the
// site's handle_errors when it has some (Caddy logs those at debug level),
// else with the bare status here, so that Caddy does not log every refused
// request as an error: the outage is logged, throttled, by failureLog.
func refuse(w http.ResponseWriter, r *http.Request, err error) error {
	var he caddyhttp.HandlerError
	if hasErrorRoutes(r) || !errors.As(err, &he) {
		return err
	}
	w.WriteHeader(he.StatusCode)
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

// breakers are the circuit breakers of the Redis clients in use, with
// their Redis's label, read by the caddy_rate_limit_circuit_open gauge; a
// shared client adds its own and removes it when it closes.
var breakers sync.Map // *algorithms.Breaker → label string

// circuitDesc is caddy_rate_limit_circuit_open's description.
var circuitDesc = prometheus.NewDesc("caddy_rate_limit_circuit_open",
	"1 while a circuit breaker keeps requests from the Redis labelled.", []string{"redis"}, nil)

// circuitGauge is caddy_rate_limit_circuit_open{redis}: per Redis, 1 while
// a breaker of a client talking to it is open (clients that differ in
// settings other than the address share a label: the largest counts).
type circuitGauge struct{}

func (circuitGauge) Describe(ch chan<- *prometheus.Desc) { ch <- circuitDesc }

func (circuitGauge) Collect(ch chan<- prometheus.Metric) {
	open := map[string]float64{}
	breakers.Range(func(b, label any) bool {
		l, _ := label.(string)
		if _, seen := open[l]; !seen {
			open[l] = 0
		}
		if b, ok := b.(*algorithms.Breaker); ok && b.IsOpen() {
			open[l] = 1
		}
		return true
	})
	for l, v := range open {
		ch <- prometheus.MustNewConstMetric(circuitDesc, prometheus.GaugeValue, v, l)
	}
}

// redisLabel names a Redis in metrics: its Sentinel master name, else its
// configured addresses (host:port, comma-separated); never credentials or
// a key.
func redisLabel(opts *redis.UniversalOptions) string {
	if opts.MasterName != "" {
		return opts.MasterName
	}
	return strings.Join(opts.Addrs, ",")
}
