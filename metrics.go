package sluice

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// outcome is a decision outcome counted in caddy_rate_limit_decisions_total.
type outcome int

const (
	outcomeAllowed outcome = iota
	outcomeDenied
	outcomeDryRunDenied
	outcomeFailedOpen
	outcomeFailedClosed
	outcomeLocal
	outcomeDelayed // admitted with a reservation (max_delay)
	outcomeBanned  // denied: the key is banned in this zone (ban)
	outcomes
)

// outcomeNames are the outcomes' label values.
var outcomeNames = [outcomes]string{"allowed", "denied", "dry_run_denied", "failed_open", "failed_closed", "local", "delayed", "banned"}

// The metrics' namespace and subsystem: caddy_rate_limit_*.
const ns, sub = "caddy", "rate_limit"

// nearLimitShare is the share of a zone's limit under which an admitted
// request counts as near the limit.
const nearLimitShare = 0.2

// metrics are Sluice's collectors on one config's registry. Labels are zone
// names, outcomes and causes: never keys, whose number has no bound.
type metrics struct {
	decisions       *prometheus.CounterVec
	nearLimit       *prometheus.CounterVec
	backendDuration *prometheus.HistogramVec // by redis
	backendErrors   *prometheus.CounterVec   // by redis and cause
	denyCacheHits   *prometheus.CounterVec
}

// newMetrics registers the collectors on ctx's registry, or takes those
// another handler of the same config registered.
func newMetrics(ctx caddy.Context) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "decisions_total",
			Help: "Rate limit decisions by zone and outcome."}, []string{"zone", "outcome"}),
		nearLimit: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "near_limit_total",
			Help: "Admitted requests that left under 20% of the zone's limit."}, []string{"zone"}),
		backendDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "backend_duration_seconds",
			Help:    "Time of one decision by the Redis store, by the Redis it talks to.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25}}, []string{"redis"}),
		backendErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "backend_errors_total",
			Help: "Failed Redis decisions by the Redis they went to and cause; circuit_open counts the decisions the open breaker kept from it."},
			[]string{"redis", "cause"}),
		denyCacheHits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "deny_cache_hits_total",
			Help: "Denials answered from the local deny cache, without Redis."}, []string{"zone"}),
	}
	registry := ctx.GetMetricsRegistry()
	var err error
	m.decisions = register(registry, m.decisions, &err)
	m.nearLimit = register(registry, m.nearLimit, &err)
	m.backendDuration = register(registry, m.backendDuration, &err)
	m.backendErrors = register(registry, m.backendErrors, &err)
	m.denyCacheHits = register(registry, m.denyCacheHits, &err)
	register(registry, circuitGauge{}, &err)
	register(registry, subscriptionGauge{}, &err)
	return m, err
}

// forRedis shows a Redis's series at 0 before its first call and failure.
func (m *metrics) forRedis(label string) {
	m.backendDuration.WithLabelValues(label)
	for _, c := range append(callCauses, "circuit_open") {
		m.backendErrors.WithLabelValues(label, c)
	}
}

// collectors are the process's collectors by definition: every config
// registers the same ones on its registry. Counters thus run on across
// reloads, and whichever config's registry the admin /metrics endpoint
// serves shows them (Caddy swaps that endpoint before it provisions a new
// config, and keeps the new one when the load then fails, while the
// running config's handlers go on counting).
var collectors = struct {
	sync.Mutex
	byDesc map[string]prometheus.Collector
}{byDesc: make(map[string]prometheus.Collector)}

// register registers on registry the process's collector defined as c
// (c itself, the first time) and returns it.
func register[C prometheus.Collector](registry *prometheus.Registry, c C, err *error) C {
	c = shared(c)
	if registry == nil {
		return c
	}
	if e := registry.Register(c); e != nil {
		var already prometheus.AlreadyRegisteredError
		if !errors.As(e, &already) || already.ExistingCollector != prometheus.Collector(c) {
			*err = errors.Join(*err, e)
		}
	}
	return c
}

// shared is the process's collector with c's descriptions.
func shared[C prometheus.Collector](c C) C {
	descs := make(chan *prometheus.Desc, 4)
	go func() { c.Describe(descs); close(descs) }()
	var id strings.Builder
	for d := range descs {
		id.WriteString(d.String())
	}
	collectors.Lock()
	defer collectors.Unlock()
	if existing, ok := collectors.byDesc[id.String()].(C); ok {
		return existing
	}
	collectors.byDesc[id.String()] = c
	return c
}

// zoneMetrics are one zone's counters, looked up once at provision.
type zoneMetrics struct {
	outcomes      [outcomes]prometheus.Counter
	nearLimit     prometheus.Counter
	denyCacheHits prometheus.Counter
}

func (m *metrics) forZone(name string) zoneMetrics {
	zm := zoneMetrics{
		nearLimit:     m.nearLimit.WithLabelValues(name),
		denyCacheHits: m.denyCacheHits.WithLabelValues(name),
	}
	for o, label := range outcomeNames {
		zm.outcomes[o] = m.decisions.WithLabelValues(name, label)
	}
	return zm
}

// countDecisions records the store's decisions of v; handlerDryRun is the
// handler's dry_run, and logger logs dry-run denials.
func countDecisions(v *verdict, handlerDryRun bool, logger *zap.Logger) {
	for i, z := range v.zones {
		d := v.ds[i]
		switch {
		case d.Allowed:
			z.metrics.outcomes[allowedOutcome(d, handlerDryRun)].Inc()
			if float64(d.Remaining) < nearLimitShare*float64(v.capacity(i)) {
				z.metrics.nearLimit.Inc()
			}
		case z.DryRun || handlerDryRun:
			z.metrics.outcomes[outcomeDryRunDenied].Inc()
			z.logDryRun(logger)
		case d.Banned:
			z.metrics.outcomes[outcomeBanned].Inc()
			z.countTop(v, i)
		default:
			z.metrics.outcomes[outcomeDenied].Inc()
			z.countTop(v, i)
		}
		if d.Cached && !d.Allowed && !z.DryRun {
			z.metrics.denyCacheHits.Inc()
		}
	}
}

// logDryRun logs, at most once per logInterval, that the zone would have
// denied requests, and how many since its last line.
func (z *Zone) logDryRun(logger *zap.Logger) {
	if n, ok := z.dryRunLog.tickAt(time.Now()); ok {
		logger.Info("dry run: zone would deny", zap.String("zone", z.name), zap.Int("requests", n))
	}
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

// countFailed records requests decided by failure_mode, as o.
func countFailed(zones []*Zone, o outcome) {
	for _, z := range zones {
		z.metrics.outcomes[o].Inc()
	}
}

// traceDecision adds the decision to the request's span, when Caddy's
// tracing handler made one that records: rate_limit.zones (the zones that
// matched), rate_limit.outcome (allowed, delayed, denied, dry_run_denied,
// failed_open, failed_closed, local), rate_limit.remaining (the least of
// the zones') and, on a rejection, rate_limit.retry_after (seconds). Keys
// are never added: they may be secrets, and log_key is for logs.
//
// v's zones are the request's; its decisions, if any, give the remaining.
func traceDecision(ctx context.Context, v *verdict, o outcome, retrySeconds int64) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	names := make([]string, len(v.zones))
	for i, z := range v.zones {
		names[i] = z.name
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, attribute.StringSlice("rate_limit.zones", names), attribute.String("rate_limit.outcome", outcomeNames[o]))
	if ds := v.ds; len(ds) > 0 {
		least := ds[0].Remaining
		for _, d := range ds[1:] {
			least = min(least, d.Remaining)
		}
		attrs = append(attrs, attribute.Int64("rate_limit.remaining", max(0, least))) // a debt reads 0, as in the headers
	}
	if retrySeconds > 0 {
		attrs = append(attrs, attribute.Int64("rate_limit.retry_after", retrySeconds))
	}
	span.SetAttributes(attrs...)
}

// admittedOutcome is the trace outcome of v, admitted (or let through by
// the handler's dry_run).
func admittedOutcome(v *verdict, handlerDryRun bool) outcome {
	if v.local {
		return outcomeLocal
	}
	o := outcomeAllowed
	for _, d := range v.ds {
		if !d.Allowed {
			return outcomeDryRunDenied
		}
		if allowedOutcome(d, handlerDryRun) == outcomeDelayed {
			o = outcomeDelayed
		}
	}
	return o
}

// observeBackend records one call to the Redis labelled redis; answers
// from the deny cache are not calls, and a decision the open breaker kept
// from Redis counts as an error of cause circuit_open (no duration): every
// decision failure_mode takes is counted as an error of some cause.
func (m *metrics) observeBackend(redis string, took time.Duration, ds []algorithms.Decision, err error) {
	if errors.Is(err, algorithms.ErrCircuitOpen) {
		m.backendErrors.WithLabelValues(redis, "circuit_open").Inc()
		return
	}
	for _, d := range ds {
		if d.Cached {
			return
		}
	}
	m.backendDuration.WithLabelValues(redis).Observe(took.Seconds())
	if err != nil {
		m.backendErrors.WithLabelValues(redis, cause(err)).Inc()
	}
}

// breakers are the circuit breakers of the Redis clients in use, with
// their Redis's label, read by the caddy_rate_limit_circuit_open gauge; a
// shared client adds its own and removes it when it closes.
var breakers sync.Map // *algorithms.Breaker → label string

// circuitDesc is caddy_rate_limit_circuit_open's description.
var circuitDesc = prometheus.NewDesc(prometheus.BuildFQName(ns, sub, "circuit_open"),
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
	var err error // a clash with a foreign collector: the metrics go unregistered
	registry := ctx.GetMetricsRegistry()
	waits := register(registry, prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "delay_seconds",
		Help: "How long requests admitted with a reservation (max_delay) were held before being passed on.", Buckets: delayBuckets},
		[]string{"zone"}), &err)
	abandoned := register(registry, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "delay_abandoned_total",
		Help: "Requests held for max_delay whose client left before their turn (their reservation stays spent)."}, []string{"zone"}), &err)
	return &delayMetrics{waits: waits.WithLabelValues(z.name), abandoned: abandoned.WithLabelValues(z.name)}
}

// settleMetrics are one zone's counters of what it settles after responses.
// Labels are zone names only, never keys.
type settleMetrics struct {
	refunds prometheus.Counter // settlements that gave quota back
	debts   prometheus.Counter // settlements that took more than reserved
	leases  prometheus.Gauge   // leases this instance holds now
}

// settleMetricsFor registers the settlement collectors on ctx's registry
// (or takes those registered there before) and returns zone's.
func settleMetricsFor(ctx caddy.Context, zone string) settleMetrics {
	var err error // a clash with a foreign collector: the metrics go unregistered
	registry := ctx.GetMetricsRegistry()
	refunds := register(registry, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "refunds_total",
		Help: "Settlements after a response that gave quota back (count_status not matched, cost_from_response below the reservation)."}, []string{"zone"}), &err)
	debts := register(registry, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "debts_total",
		Help: "Settlements after a response that took more than was reserved (cost_from_response)."}, []string{"zone"}), &err)
	leases := register(registry, prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "leases_held",
		Help: "Concurrency leases this instance holds: requests in flight."}, []string{"zone"}), &err)
	return settleMetrics{
		refunds: refunds.WithLabelValues(zone),
		debts:   debts.WithLabelValues(zone),
		leases:  leases.WithLabelValues(zone),
	}
}

// count records a settlement.
func (m settleMetrics) count(s algorithms.Settlement) {
	switch {
	case s.Delta < 0:
		m.refunds.Inc()
	case s.Delta > 0:
		m.debts.Inc()
	}
}
