package sluice

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// maxBackgroundSettles bounds the settlements running after their
// responses; past it a request settles before its handler returns, so no
// settlement is ever dropped and a slow store slows its own requests
// rather than piling up goroutines.
const maxBackgroundSettles = 4096

// backgroundSettles holds a slot per settlement running in the background.
var backgroundSettles = make(chan struct{}, maxBackgroundSettles)

// settling counts the settlements not yet applied; tests wait on it.
var settling pendingCount

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

// serveSettling passes an admitted request on, and when one of its zones
// settles after the response (count_status, cost_from_response,
// concurrency), watches the response's status and settles when the next
// handler is done: returned, failed, or panicked. local says the decisions
// came from the failure_mode local store, which then settles them.
func (h *Handler) serveSettling(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler,
	repl *caddy.Replacer, zones []*Zone, reqs []algorithms.Request, ds []algorithms.Decision, local bool) error {
	if !algorithms.Admitted(reqs, ds) || !algorithms.Settles(reqs) { // a dry-run denial took nothing
		return next.ServeHTTP(w, r)
	}
	store, ok := h.backend.store.(algorithms.Settler)
	if local {
		store, ok = h.backend.local.current(), true
	}
	if !ok {
		return next.ServeHTTP(w, r)
	}
	leasesTaken(zones, reqs, ds, 1)
	leaseRenewals.start(store, reqs, ds) // lease_renewal.go
	rec := &statusRecorder{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w}}
	done := false
	defer func() {
		if !done { // a panic (http.ErrAbortHandler too): settle, and let it go on
			h.settleAfter(r.Context(), store, repl, zones, reqs, ds, settledStatus(r.Context(), rec, errPanicked))
		}
	}()
	err := next.ServeHTTP(rec, r)
	done = true
	h.settleAfter(r.Context(), store, repl, zones, reqs, ds, settledStatus(r.Context(), rec, err))
	return err
}

// settledStatus is the status a response settles with: the one written,
// else, when the client left before any was written, 499 (client closed
// request; whatever error the next handler made of it), else the error's.
func settledStatus(ctx context.Context, rec *statusRecorder, err error) int {
	if rec.status == 0 && ctx.Err() != nil {
		return statusClientClosed
	}
	return rec.final(err)
}

// releaseUndecided gives back, in the background, the leases of a
// decision that failed: its call may have run in Redis though its answer
// was lost (a timeout, a client gone), and a lease never released would
// hold its slot for the zone's window. Releasing a lease never taken does
// nothing. With the breaker open nothing ran.
func (h *Handler) releaseUndecided(ctx context.Context, reqs []algorithms.Request, err error) {
	store, ok := h.backend.store.(algorithms.Settler)
	if !ok || errors.Is(err, algorithms.ErrCircuitOpen) {
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
	go h.applySettlements(context.WithoutCancel(ctx), store, ss)
}

// settleAfter builds the settlements of the zones that took quota and
// applies them: on Redis in the background (or here, when too many already
// run), with a context that outlives the request's; in memory at once.
func (h *Handler) settleAfter(ctx context.Context, store algorithms.Settler, repl *caddy.Replacer,
	zones []*Zone, reqs []algorithms.Request, ds []algorithms.Decision, status int) {
	leasesTaken(zones, reqs, ds, -1)
	leaseRenewals.stop(store, reqs)
	var ss []algorithms.Settlement
	for i, z := range zones {
		if !reqs[i].Settles || !ds[i].Allowed {
			continue
		}
		if s, ok := z.settlement(repl, reqs[i], ds[i], status); ok {
			z.settle.metrics.count(s)
			ss = append(ss, s)
		}
	}
	if len(ss) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	settling.Add(1)
	if _, memory := store.(*algorithms.MemoryStore); memory {
		h.applySettlements(ctx, store, ss) // a map update: cheaper than a goroutine
		return
	}
	select {
	case backgroundSettles <- struct{}{}:
		go func() {
			defer func() { <-backgroundSettles }()
			h.applySettlements(ctx, store, ss)
		}()
	default:
		h.applySettlements(ctx, store, ss)
	}
}

// applySettlements settles ss within the store timeout; a failure is
// logged (at most once per interval) and counted, and a lost lease
// expires after its zone's window.
func (h *Handler) applySettlements(ctx context.Context, store algorithms.Settler, ss []algorithms.Settlement) {
	defer settling.Done()
	if h.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.timeout)
		defer cancel()
	}
	if err := store.Settle(ctx, ss); err != nil {
		h.metrics.backendErrors.WithLabelValues(h.backend.label, cause(err)).Inc()
		if n, ok := settleFailures.tickAt(time.Now()); ok {
			h.logger.Warn("settling rate limits after responses failed; refunds and debts are lost, leases expire after their window",
				zap.Error(err), zap.Int("settlements", n))
		}
	}
}

// settleFailures throttles the logs of failed settlements.
var settleFailures = throttle{interval: logInterval}

// statusRecorder notes the status of the response it passes through,
// without buffering: writes and flushes go straight on.
type statusRecorder struct {
	*caddyhttp.ResponseWriterWrapper
	status int // the final status written; 0 until then
}

// errPanicked stands for the error of a handler that panicked: its status
// is what it wrote, else 500.
var errPanicked = errors.New("handler panicked")

// WriteHeader notes the final status: 2xx to 5xx, or 101 (an upgrade, such
// as a WebSocket); other 1xx are interim.
func (w *statusRecorder) WriteHeader(status int) {
	if w.status == 0 && (status >= 200 || status == http.StatusSwitchingProtocols) {
		w.status = status
	}
	w.ResponseWriterWrapper.WriteHeader(status)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriterWrapper.Write(b)
}

func (w *statusRecorder) ReadFrom(r io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriterWrapper.ReadFrom(r)
}

// Flush sends what is buffered (an implicit 200 if no status was written).
func (w *statusRecorder) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriterWrapper.ResponseWriter).Flush()
}

// final is the response's status, once the next handler returned err:
// what was written, else the error's status (Caddy's error routes answer
// with it), else 200, as net/http sends for a handler that wrote nothing.
func (w *statusRecorder) final(err error) int {
	if w.status != 0 {
		return w.status
	}
	if err == nil {
		return http.StatusOK
	}
	var he caddyhttp.HandlerError
	if errors.As(err, &he) && he.StatusCode != 0 {
		return he.StatusCode
	}
	return http.StatusInternalServerError
}

// Interface guards
var (
	_ http.ResponseWriter = (*statusRecorder)(nil)
	_ http.Flusher        = (*statusRecorder)(nil)
)
