package sluice

import (
	"context"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// statusClientClosed is what a request whose client left gets in the
// access log (nginx's and reverse_proxy's 499, client closed request).
const statusClientClosed = 499

// maxMaxDelay is the longest max_delay: a waiting request holds its
// client's connection, and a client that waits longer than a minute for a
// response has usually given up (or should be told to come back, with
// Retry-After).
const maxMaxDelay = time.Minute

// defaultMaxWaiting bounds the requests one handler holds for their turn
// (max_delay) at once: 1024. Past it, a request that would have to wait is
// decided as if its wait were longer than max_delay: rejected with
// Retry-After, consuming nothing, while requests that need no wait still
// pass. Each waiting request holds a client connection (a file
// descriptor), a goroutine and a timer, some tens of KB with their
// buffers: 1024 of them cost tens of MB and a thousand descriptors at
// most, however many keys a flood spreads over, and shaping rarely needs
// more (a key has at most events × max_delay / window waiting: 100 at
// 100/s with max_delay 1s).
const defaultMaxWaiting = 1024

// waiting counts one handler's requests held for their turn, up to limit.
type waiting struct {
	n     atomic.Int64
	limit int64
	full  throttle // logs, at most once per logInterval, that limit was reached
}

// newWaiting is the count of a handler with zones, or nil when none of
// them has max_delay.
func newWaiting(zones []*Zone) *waiting {
	for _, z := range zones {
		if z.MaxDelay > 0 {
			return &waiting{limit: defaultMaxWaiting, full: throttle{interval: logInterval}}
		}
	}
	return nil
}

// place is one request's place among the waiting, or none (w nil). Its
// owner releases it when the request's wait is over or was never needed.
type place struct{ w *waiting }

// release gives the place back, once; a released place, or none, does
// nothing.
func (p *place) release() {
	if p.w != nil {
		p.w.n.Add(-1)
		p.w = nil
	}
}

// waitPlace takes a place among the handler's waiting requests for reqs,
// which may then be admitted to wait (max_delay). When every place is
// taken, reqs may not wait: their zones decide as without max_delay, so a
// request that would have waited is rejected as if its wait were too long.
// The handler's dry_run never waits: it needs no place.
func (h *Handler) waitPlace(reqs []algorithms.Request) place {
	if h.waiting == nil || h.DryRun {
		return place{}
	}
	if h.waiting.n.Add(1) <= h.waiting.limit {
		return place{w: h.waiting}
	}
	h.waiting.n.Add(-1)
	for i := range reqs {
		reqs[i].Limit.MaxDelay = 0
	}
	if n, ok := h.waiting.full.tickAt(time.Now()); ok {
		h.logger.Warn("max_delay: as many requests wait as a handler holds; those that would wait are rejected",
			zap.Int64("waiting", h.waiting.limit), zap.Int("requests", n))
	}
	return place{}
}

// delayMetrics are one max_delay zone's collectors: the waits it imposed
// and the waits its clients did not see through. Labels are zone names
// only, never keys.
type delayMetrics struct {
	waits     prometheus.Observer // seconds each delayed request was held for
	abandoned prometheus.Counter  // delayed requests whose client left first
}

// delayBuckets span a few ms to the longest useful max_delay of an
// interactive client; a longer wait counts in +Inf.
var delayBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// delayMetricsFor registers the delay collectors on ctx's registry (or
// takes those registered there before) and returns zone's; a zone without
// max_delay gets none, so its series do not appear.
func delayMetricsFor(ctx caddy.Context, z *Zone) *delayMetrics {
	if z.MaxDelay <= 0 {
		return nil
	}
	const ns, sub = "caddy", "rate_limit"
	var err error // a clash with a foreign collector: the metrics go unregistered
	registry := ctx.GetMetricsRegistry()
	waits := register(registry, prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "delay_seconds",
		Help: "How long requests admitted with a reservation (max_delay) were held before being passed on.", Buckets: delayBuckets},
		[]string{"zone"}), &err)
	abandoned := register(registry, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "delay_abandoned_total",
		Help: "Requests held for max_delay whose client left before their turn (their reservation stays spent)."}, []string{"zone"}), &err)
	return &delayMetrics{waits: waits.WithLabelValues(z.name), abandoned: abandoned.WithLabelValues(z.name)}
}

// allowedOutcome is the outcome of a zone that admitted: delayed when it
// holds the request for its turn (never under the handler's dry_run,
// which passes every request on at once).
func allowedOutcome(d algorithms.Decision, handlerDryRun bool) outcome {
	if d.Delay > 0 && !handlerDryRun {
		return outcomeDelayed
	}
	return outcomeAllowed
}

// delayedNext is next, or, when the admitted request holds reservations
// (max_delay), a handler that first waits for the latest of their turns,
// taking over p, the request's place among the waiting, which it releases
// when the wait is over. The handler's dry_run never waits. A wait is
// counted from when the decision arrived, so it ends no earlier than the
// store's turn.
func (h *Handler) delayedNext(next caddyhttp.Handler, zones []*Zone, ds []algorithms.Decision, p *place) caddyhttp.Handler {
	if h.DryRun {
		return next
	}
	var wait time.Duration
	for _, d := range ds {
		wait = max(wait, d.Delay)
	}
	if wait <= 0 {
		return next
	}
	// a copy: zones is on the caller's stack in the common, undelayed case
	d := &delayed{next: next, wait: wait, zones: slices.Clone(zones), ds: ds, place: *p, logger: h.logger}
	*p = place{}
	return d
}

// delayed holds a request for wait, then passes it on to next.
type delayed struct {
	next   caddyhttp.Handler
	wait   time.Duration
	zones  []*Zone
	ds     []algorithms.Decision
	place  place // released when the wait is over
	logger *zap.Logger
}

// ServeHTTP waits for the request's turn on its own goroutine (a timer, no
// polling). A client that leaves first ends the wait: the request is not
// passed on, its reservation stays spent (it was counted in the store when
// admitted), and it is logged with 499.
func (d *delayed) ServeHTTP(w http.ResponseWriter, r *http.Request) error {
	d.observe()
	turn := waitTurn(r.Context(), d.wait)
	d.place.release()
	if !turn {
		d.abandon()
		w.WriteHeader(statusClientClosed)
		return nil
	}
	return d.next.ServeHTTP(w, r)
}

// waitTurn waits for wait, or until ctx is done; true when the turn came.
func waitTurn(ctx context.Context, wait time.Duration) bool {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// observe records the wait in each zone that imposed a delay.
func (d *delayed) observe() {
	for i, z := range d.zones {
		if d.ds[i].Delay > 0 && z.delay != nil {
			z.delay.waits.Observe(d.wait.Seconds())
		}
	}
}

// abandon counts and logs (at debug level: a client may leave every
// request) a wait its client did not see through.
func (d *delayed) abandon() {
	for i, z := range d.zones {
		if d.ds[i].Delay > 0 && z.delay != nil {
			z.delay.abandoned.Inc()
		}
	}
	d.logger.Debug("client left while its request waited for its turn (max_delay)", zap.Duration("wait", d.wait))
}

// Interface guards
var _ caddyhttp.Handler = (*delayed)(nil)
