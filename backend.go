package sluice

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/quota"
	"github.com/sluicehq/caddy-sluice/redisstore"
)

// The failure modes: what to do with a request while Redis fails.
const (
	failOpen   = "open"
	failClosed = "closed"
	failLocal  = "local"
)

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
// chain that guards it, the local fallback, and what the store can do
// besides the contract (algorithms.Store), asked once here.
type stores struct {
	kind    string                    // what the admin API calls the store: "memory", or the shared store's name ("redis")
	store   algorithms.Store          // what decides: memoryStore, or the quota leases over the chain algorithms.Guard builds
	remote  bool                      // store is shared by instances: its calls are timed, bounded and may fail
	leases  *quota.Leases             // the chain's head: hot keys decided from quota leases; nil in memory
	cache   *algorithms.DenyCache     // then cached denials, then the call; nil in memory
	breaker *algorithms.Breaker       // the chain's breaker: its state is the backend's health; nil in memory
	local   *localFallback            // failure_mode local's store
	server  *serverInfo               // which server answers; nil unless the store is an algorithms.ServerDescriber
	top     algorithms.TopSharer      // top offenders of every instance; nil unless the store shares them
	lister  algorithms.OverrideLister // lists a zone's overrides (the admin API); nil unless the store can
	label   string                    // the Redis's metrics label (redisLabel)
	outage  *outageLog                // logs the Redis's recovery, once for all its handlers
}

// memoryStores are the stores of a handler without a shared store.
func memoryStores() *stores { return &stores{kind: "memory", store: memoryStore, lister: memoryStore} }

// remoteStores guard remote, a store on a server shared by instances,
// with a deny cache and a breaker, hold this instance's quota leases of
// it, and add the local fallback and its optional capabilities: a server
// that can say what it is (at addrs, for the logs) and top offenders
// shared by every instance. kind names the store in the admin API, label
// in metrics and logs.
func remoteStores(kind string, remote algorithms.QuotaLender, label string, addrs []string, logger *zap.Logger) stores {
	cache, b := algorithms.Guard(remote)
	leases := quota.NewLeases(cache.Uncached(), remote, instanceID, observeQuotaLease) // the backend looks up cached denials itself, after Take
	leases.DropsDenials(cache)
	if r, ok := remote.(algorithms.GiveBackReporter); ok {
		leases.GiveBacksReportedBy(r)
	}
	s := stores{kind: kind, store: leases, remote: true, leases: leases, cache: cache, breaker: b, local: newLocalFallback(), label: label,
		outage: newOutageLog(logger, label)}
	if d, ok := remote.(algorithms.ServerDescriber); ok {
		s.server = &serverInfo{describer: d, logger: logger, addrs: addrs}
	}
	if t, ok := remote.(algorithms.TopSharer); ok {
		s.top = t
	}
	if l, ok := remote.(algorithms.OverrideLister); ok {
		s.lister = l
	}
	return s
}

// healthy reports whether requests reach the store: false while the
// breaker keeps them from Redis.
func (s *stores) healthy() bool { return s.breaker == nil || !s.breaker.IsOpen() }

// A backend decides a handler's requests and settles what they took. A
// handler without a redis block has a memoryBackend, on this instance's
// counters; one with Redis a redisBackend, which guards each call (cached
// denials, timeout, breaker) and decides by failure_mode while Redis
// fails. Both take a waiting request's place (max_delay) before deciding;
// what they decided is observed by ServeHTTP (observe.go).
type backend interface {
	// decide returns v with its decisions. A request no zone matched has
	// nothing to decide: its decisions stay nil, as do those of a request
	// failure_mode open passed undecided. The error is errClientLeft when
	// the client left first, and a 503 error when failure_mode closed
	// refused the request. v goes in and out by value: through an
	// interface a pointer to it would move it off ServeHTTP's stack.
	decide(ctx context.Context, v verdict) (verdict, error)
	// settle applies ss, a request's settlements, on to: the store that
	// decided it, as settler chose when the response began.
	settle(ctx context.Context, to settler, ss []algorithms.Settlement)
	// shared is the backend's stores, shared with the other handlers of
	// its Redis client, or of none.
	shared() *stores
}

// deciding is what both backends hold: their stores, the handler's
// waiting places, and the collectors of their calls.
type deciding struct {
	*stores
	waiting *waiting      // nil when no zone may wait
	timeout time.Duration // per decision and settlement; 0 in memory
	metrics *metrics
	logger  *zap.Logger
}

func (d *deciding) shared() *stores { return d.stores }

// decided gives v its decisions ds and what they say (denied, settles):
// the limits in force by override go into v's requests (headers and
// settlements see them), and v's place is kept only for its wait.
func (d *deciding) decided(v *verdict, ds []algorithms.Decision) {
	v.ds = ds
	algorithms.ApplyOverrides(v.reqs, ds)
	v.denied = !algorithms.Admitted(v.reqs, ds)
	v.settles = !v.denied && algorithms.Settles(v.reqs)
	v.place.keepDelayed(ds, v.denied)
}

// memoryBackend decides on memoryStore: a map update, which never fails
// and needs no timer.
type memoryBackend struct{ deciding }

func (b *memoryBackend) decide(_ context.Context, v verdict) (verdict, error) {
	if len(v.reqs) == 0 {
		return v, nil
	}
	v.place, _ = b.waiting.take(v.reqs)
	defer v.place.releaseOnPanic()
	b.decided(&v, memoryStore.AllowAt(time.Now(), v.reqs))
	return v, nil
}

func (b *memoryBackend) settle(ctx context.Context, to settler, ss []algorithms.Settlement) {
	settling.Add(1)
	b.apply(ctx, to.store, ss)
}

// redisBackend decides on Redis: from held quota leases first, then by
// cached denials, so that a hot key and a flood cost no call (and, never
// waiting, take no place among the waiting), then through the breaker
// within the timeout; while Redis fails, by failure_mode.
type redisBackend struct {
	deciding
	failure  failurePolicy
	duration prometheus.Observer // its Redis's backend_duration_seconds (metrics.forRedis)
}

func (b *redisBackend) decide(ctx context.Context, v verdict) (verdict, error) {
	if len(v.reqs) == 0 {
		return v, nil
	}
	if ds := b.leases.Take(v.reqs); ds != nil { // from held leases: no call, so no deadline; they win over a cached denial
		b.decided(&v, ds)
		return v, nil
	}
	if ds := b.cache.Cached(v.reqs); ds != nil { // a cached denial never waits: it takes no place
		b.decided(&v, ds)
		return v, nil
	}
	var refused bool
	v.place, refused = b.waiting.take(v.reqs)
	defer v.place.releaseOnPanic()
	ds, err := b.allow(ctx, v.reqs, refused)
	if err != nil {
		b.releaseUndecided(ctx, v.reqs, err)
		if ctx.Err() != nil {
			v.place.release()
			return v, errClientLeft
		}
		err = b.failure.decide(&v, err)
		return v, err
	}
	b.decided(&v, ds)
	return v, nil
}

// allow decides reqs from this instance's quota leases (granted since
// decide looked), or else asks Redis (for leases too) through the
// breaker, within the timeout, once decide found no cached denial;
// refused says reqs could not take a place among the waiting, and
// dropped their max_delay: a denial cached for them may answer them now,
// so that a key whose places are full costs no call.
func (b *redisBackend) allow(ctx context.Context, reqs []algorithms.Request, refused bool) ([]algorithms.Decision, error) {
	if refused {
		if ds := b.cache.Cached(reqs); ds != nil {
			return ds, nil
		}
	}
	ctx = redisstore.WithTimeout(ctx, b.timeout) // no timer per decision
	start := time.Now()
	ds, err := b.store.Allow(ctx, reqs)
	if len(ds) > 0 && ds[0].Leased { // no call: Redis's health is not known from it
		return ds, nil
	}
	b.metrics.observeBackend(b.label, b.duration, time.Since(start), ds, err)
	if err == nil {
		b.failure.succeeded()
	}
	return ds, err
}

// settle applies ss on Redis in the background (or here, when too many
// already run), with a context that outlives the request's; a request the
// local store decided settles there at once.
func (b *redisBackend) settle(ctx context.Context, to settler, ss []algorithms.Settlement) {
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

// releaseUndecided gives back, in the background, the concurrency slots
// of a decision that failed: its call may have run in Redis though its
// answer was lost (a timeout, a client gone), and a slot never released
// would be held for the zone's window. Releasing a slot never taken does
// nothing. With the breaker open nothing ran.
func (b *redisBackend) releaseUndecided(ctx context.Context, reqs []algorithms.Request, err error) {
	if errors.Is(err, algorithms.ErrCircuitOpen) {
		return
	}
	var ss []algorithms.Settlement
	for _, r := range reqs {
		if r.Slot != "" {
			ss = append(ss, algorithms.Settlement{Key: r.Key, Limit: r.Limit, Slot: r.Slot})
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
// request's slots may take. The decision it cleans up after may still be
// queued behind a stalled Redis when the request's own timeout ends, and a
// release lost then holds its slot for the zone's window; it runs in the
// background, so its wait holds no request.
const undecidedReleaseTimeout = time.Second

// apply settles ss within the store timeout (or ctx's earlier deadline);
// a failure is logged (at most once per interval) and counted, and a lost
// concurrency slot expires after its zone's window (the log line says
// "leases" for the slots, as it always has).
func (b *deciding) apply(ctx context.Context, store algorithms.Store, ss []algorithms.Settlement) {
	defer settling.Done()
	if _, set := ctx.Deadline(); !set && b.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.timeout)
		defer cancel()
	}
	if err := store.Settle(ctx, ss); err != nil {
		b.metrics.observeSettleFailure(b.label, err)
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

// instanceID names this Caddy process in the stores' quota lease
// bookkeeping (algorithms.QuotaAsk.Holder): random, the same across
// config reloads, so the instances sharing a hot key's quota are counted.
var instanceID = func() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}()
