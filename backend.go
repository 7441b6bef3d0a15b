package sluice

import (
	"context"
	"errors"
	"net/http"
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

// statusClientClosed is what a request whose client left gets in the
// access log (nginx's and reverse_proxy's 499, client closed request).
const statusClientClosed = 499

// errClientLeft is the decision of a request whose client left while its
// store call was out: no store failure, and nothing to answer.
var errClientLeft = errors.New("client left before the decision")

// memoryStore holds the counters of every handler without a redis block. It
// is shared by all handlers, as zone names are global, and outlives config
// reloads, so a reload does not hand out fresh quotas.
var memoryStore = algorithms.NewMemoryStore()

// stores are what the handlers of one Redis client, or of none, decide
// with. Each is set, typed, when the stores are built, so no caller needs
// to ask a store what it is: without Redis the memory store; on Redis the
// chain that guards it, and the local fallback.
type stores struct {
	store   cachingStore        // what decides: memoryStore, or the chain algorithms.Guard builds
	remote  bool                // store is on Redis: its calls are timed, bounded and may fail
	breaker *algorithms.Breaker // the chain's breaker: its state is the backend's health; nil in memory
	local   *localFallback      // failure_mode local's store
	server  *serverInfo         // which Redis answers
	label   string              // the Redis's metrics label (redisLabel)
}

// cachingStore is what a backend asks of a store: cached denials first,
// so that a flood costs no call, then the call. On Redis it is the chain
// algorithms.Guard builds (a *algorithms.DenyCache over the breaker); in
// memory, uncached.
type cachingStore interface {
	algorithms.InspectingStore
	algorithms.Settler
	Cached(reqs []algorithms.Request) []algorithms.Decision
	AllowUncached(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error)
	// Forget drops the cached denials of a store key: another instance
	// reset it (lifting its ban, say).
	Forget(key string)
}

// uncached is the memory store as a backend asks it: a decision there
// costs no more than a cached one, so it caches none.
type uncached struct{ *algorithms.MemoryStore }

func (uncached) Cached([]algorithms.Request) []algorithms.Decision {
	return nil
}

func (uncached) Forget(string) {}

func (m uncached) AllowUncached(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	return m.Allow(ctx, reqs)
}

// memoryStores are the stores of a handler without Redis.
func memoryStores() *stores { return &stores{store: uncached{memoryStore}} }

// redisStores guard redis with a deny cache and a breaker, and add the
// local fallback; server tells which Redis answers, label names it in
// metrics.
func redisStores(redis algorithms.InspectingStore, server *serverInfo, label string) stores {
	cache, b := algorithms.Guard(redis)
	return stores{store: cache, remote: true, breaker: b, local: newLocalFallback(), server: server, label: label}
}

// inspector is the store whose keys the admin API reads and resets.
func (s *stores) inspector() algorithms.Inspector { return s.store }

// kind names the stores in the admin API: "redis" or "memory".
func (s *stores) kind() string {
	if s.remote {
		return "redis"
	}
	return "memory"
}

// healthy reports whether requests reach the store: false while the
// breaker keeps them from Redis.
func (s *stores) healthy() bool { return s.breaker == nil || !s.breaker.IsOpen() }

// backend is what one handler decides with: its stores, shared with the
// other handlers of its Redis client, and its own timeout, failure_mode
// and counters.
type backend struct {
	*stores
	timeout time.Duration // per decision and settlement; 0 in memory
	failure failurePolicy
	metrics *metrics
	dryRun  bool // the handler's dry_run, for the outcome metrics
	logger  *zap.Logger
}

// decide fills in v's decisions and counts them. When the store fails,
// failure_mode decides: local fills them in from the local store (and
// sets v.local), open leaves them nil (the request passes undecided), and
// closed returns a 503 error. A client that left returns errClientLeft.
// A request no zone matched has nothing to decide: its decisions stay nil.
func (b *backend) decide(ctx context.Context, v *verdict) error {
	if len(v.reqs) == 0 {
		return nil
	}
	ds, err := b.allow(ctx, v.reqs)
	if err != nil {
		b.releaseUndecided(ctx, v.reqs, err)
		if ctx.Err() != nil {
			return errClientLeft
		}
		return b.failure.decide(ctx, v, err)
	}
	v.ds = ds
	algorithms.ApplyOverrides(v.reqs, ds) // headers and settlements see the limit in force
	countDecisions(v, b.dryRun, b.logger)
	return nil
}

// allow asks the store: cached denials first, so that a flood costs no
// timer, no call and no backend metric, then the store; on Redis through
// the breaker, within the timeout.
func (b *backend) allow(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	if ds := b.store.Cached(reqs); ds != nil {
		return ds, nil
	}
	if !b.remote {
		return b.store.AllowUncached(ctx, reqs)
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	start := time.Now()
	ds, err := b.store.AllowUncached(ctx, reqs)
	b.metrics.observeBackend(b.label, time.Since(start), ds, err)
	if err == nil {
		b.failure.succeeded()
	}
	return ds, err
}

// failurePolicy decides the requests the store failed to decide, by
// failure_mode, and logs the failures.
type failurePolicy struct {
	mode  string
	local *localFallback // nil without Redis
	log   *failureLog
}

// decide decides v by the failure mode, and counts and traces what it
// decided; see backend.decide. A local decision is traced with its
// decisions, as an admitted or a denied request's.
func (p failurePolicy) decide(ctx context.Context, v *verdict, err error) error {
	p.log.record(time.Now(), err)
	switch p.mode {
	case failClosed:
		countFailed(v.zones, outcomeFailedClosed)
		traceDecision(ctx, v, outcomeFailedClosed, 0)
		return caddyhttp.Error(http.StatusServiceUnavailable, err)
	case failLocal:
		v.ds, v.local = p.local.failed().AllowAt(time.Now(), v.reqs), true
		countFailed(v.zones, outcomeLocal)
		return nil
	}
	countFailed(v.zones, outcomeFailedOpen)
	traceDecision(ctx, v, outcomeFailedOpen, 0)
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

// maxBackgroundSettles bounds the settlements running after their
// responses; past it a request settles before its handler returns, so no
// settlement is ever dropped and a slow store slows its own requests
// rather than piling up goroutines.
const maxBackgroundSettles = 4096

// backgroundSettles holds a slot per settlement running in the background.
var backgroundSettles = make(chan struct{}, maxBackgroundSettles)

// settling counts the settlements not yet applied; tests wait on it.
var settling pendingCount

// settleFailures throttles the logs of failed settlements.
var settleFailures = throttle{interval: logInterval}

// settle applies ss, a request's settlements, on to: in memory at once; on
// Redis in the background (or here, when too many already run), with a
// context that outlives the request's.
func (b *backend) settle(ctx context.Context, to settler, ss []algorithms.Settlement) {
	ctx = context.WithoutCancel(ctx)
	settling.Add(1)
	if to.inline {
		b.apply(ctx, to.store, ss)
		return
	}
	select {
	case backgroundSettles <- struct{}{}:
		go func() {
			defer func() { <-backgroundSettles }()
			b.apply(ctx, to.store, ss)
		}()
	default:
		b.apply(ctx, to.store, ss)
	}
}

// releaseUndecided gives back, in the background, the leases of a
// decision that failed: its call may have run in Redis though its answer
// was lost (a timeout, a client gone), and a lease never released would
// hold its slot for the zone's window. Releasing a lease never taken does
// nothing. With the breaker open nothing ran.
func (b *backend) releaseUndecided(ctx context.Context, reqs []algorithms.Request, err error) {
	if !b.remote || errors.Is(err, algorithms.ErrCircuitOpen) {
		return
	}
	var ss []algorithms.Settlement
	for _, r := range reqs {
		if r.Lease != "" {
			ss = append(ss, algorithms.Settlement{Key: r.Key, Limit: r.Limit, Lease: r.Lease})
		}
	}
	if len(ss) == 0 {
		return
	}
	settling.Add(1)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(b.timeout, undecidedReleaseTimeout))
	go func() {
		defer cancel()
		b.apply(ctx, b.store, ss)
	}()
}

// undecidedReleaseTimeout is the least time a release of an undecided
// request's leases may take. The decision it cleans up after may still be
// queued behind a stalled Redis when the request's own timeout ends, and a
// release lost then holds its slot for the zone's window; it runs in the
// background, so its wait holds no request.
const undecidedReleaseTimeout = time.Second

// apply settles ss within the store timeout (or ctx's earlier deadline);
// a failure is logged (at most once per interval) and counted, and a lost
// lease expires after its zone's window.
func (b *backend) apply(ctx context.Context, store algorithms.Settler, ss []algorithms.Settlement) {
	defer settling.Done()
	if _, set := ctx.Deadline(); !set && b.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.timeout)
		defer cancel()
	}
	if err := store.Settle(ctx, ss); err != nil {
		b.metrics.backendErrors.WithLabelValues(b.label, cause(err)).Inc()
		if n, ok := settleFailures.tickAt(time.Now()); ok {
			b.logger.Warn("settling rate limits after responses failed; refunds and debts are lost, leases expire after their window",
				zap.Error(err), zap.Int("settlements", n))
		}
	}
}

// pendingCount is a count that can be waited on until it is zero, by any
// number of waiters while it keeps changing (which a sync.WaitGroup
// forbids).
type pendingCount struct {
	mu   sync.Mutex
	zero *sync.Cond
	n    int
}

func (p *pendingCount) Add(delta int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.zero == nil {
		p.zero = sync.NewCond(&p.mu)
	}
	if p.n += delta; p.n == 0 {
		p.zero.Broadcast()
	}
}

func (p *pendingCount) Done() { p.Add(-1) }

// Wait returns once no settlement is pending.
func (p *pendingCount) Wait() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.n > 0 {
		p.zero.Wait()
	}
}
