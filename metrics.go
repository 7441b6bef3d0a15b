package sluice

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/quota"
)

// The metrics' namespace and subsystem: caddy_rate_limit_*.
const ns, sub = "caddy", "rate_limit"

// metrics are Sluice's collectors on one config's registry. Labels are zone
// names, outcomes and causes: never keys, whose number has no bound.
type metrics struct {
	decisions       *prometheus.CounterVec
	nearLimit       *prometheus.CounterVec
	backendDuration *prometheus.HistogramVec // by redis
	backendErrors   *prometheus.CounterVec   // by redis and cause
	denyCacheHits   *prometheus.CounterVec
	quotaLeaseUnits *prometheus.CounterVec // by zone and kind (quotaLeaseKinds)
	quotaLeases     *prometheus.CounterVec // grants, by zone
}

// newMetrics registers the collectors on ctx's registry, or takes those
// another handler of the same config registered.
func newMetrics(ctx caddy.Context) (*metrics, error) {
	return metricsOn(ctx.GetMetricsRegistry())
}

// unexposed stands for the registry of a handler with disable_metrics:
// collectors registered on it are the handler's own, counted into and
// never exposed (register returns them as they are).
var unexposed = prometheus.NewRegistry()

// metricsOn registers the collectors on registry, or takes those another
// handler of the same config registered; on unexposed, they are new.
func metricsOn(registry *prometheus.Registry) (*metrics, error) {
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
		quotaLeaseUnits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "quota_lease_units_total",
			Help: "Units of quota leases by zone and kind: granted to this instance, used by its admissions, returned (given back unused) and expired (unused, not given back)."},
			[]string{"zone", "kind"}),
		quotaLeases: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "quota_lease_grants_total",
			Help: "Quota leases granted to this instance."}, []string{"zone"}),
	}
	var err error
	m.decisions = register(registry, m.decisions, &err)
	m.nearLimit = register(registry, m.nearLimit, &err)
	m.backendDuration = register(registry, m.backendDuration, &err)
	m.backendErrors = register(registry, m.backendErrors, &err)
	m.denyCacheHits = register(registry, m.denyCacheHits, &err)
	m.quotaLeaseUnits = register(registry, m.quotaLeaseUnits, &err)
	m.quotaLeases = register(registry, m.quotaLeases, &err)
	register(registry, circuitGauge{}, &err)
	register(registry, subscriptionGauge{}, &err)
	return m, err
}

// forRedis shows a Redis's series at 0 before its first call and failure,
// and returns its backend_duration_seconds, resolved once, as a zone's
// counters are (forZone): a call then observes it without hashing and
// looking up its label.
func (m *metrics) forRedis(label string) prometheus.Observer {
	for _, c := range append(callCauses, "circuit_open") {
		m.backendErrors.WithLabelValues(label, c)
	}
	return m.backendDuration.WithLabelValues(label)
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
	if registry == unexposed {
		return c
	}
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
	quotaLeases   *quotaLeaseMetrics // nil in a zone that does not lease
}

// forZone looks up zone name's counters; those of quota leases only when
// the zone leases, so that the series of others do not appear.
func (m *metrics) forZone(name string, leases bool) zoneMetrics {
	zm := zoneMetrics{
		nearLimit:     m.nearLimit.WithLabelValues(name),
		denyCacheHits: m.denyCacheHits.WithLabelValues(name),
	}
	for o, label := range outcomeNames {
		zm.outcomes[o] = m.decisions.WithLabelValues(name, label)
	}
	if leases {
		ql := &quotaLeaseMetrics{grants: m.quotaLeases.WithLabelValues(name)}
		for k, kind := range quotaLeaseKinds {
			ql.units[k] = m.quotaLeaseUnits.WithLabelValues(name, kind)
		}
		zm.quotaLeases = ql
	}
	return zm
}

// quotaLeaseKinds are the kinds of caddy_rate_limit_quota_lease_units_total:
// units granted to this instance (beyond the granting request's cost),
// used by its admissions from a lease, returned (given back unused when
// the lease ended, and taken by Redis), expired (unused, not given back)
// and refused (given back, and refused by Redis).
var quotaLeaseKinds = [...]string{"granted", "used", "returned", "expired", "refused"}

// quotaLeaseMetrics are a leasing zone's counters of its quota leases.
type quotaLeaseMetrics struct {
	units  [len(quotaLeaseKinds)]prometheus.Counter
	grants prometheus.Counter
}

// add counts units of the zone's quota leases as kind (LeaseGranted and
// the others, in quotaLeaseKinds' order); a grant is one more lease.
func (m *quotaLeaseMetrics) add(kind quota.LeaseEvent, units int64) {
	if int(kind) >= len(m.units) || units <= 0 {
		return
	}
	m.units[kind].Add(float64(units))
	if kind == quota.LeaseGranted {
		m.grants.Inc()
	}
}

// count counts one decision of the zone as o.
func (m *zoneMetrics) count(o outcome) { m.outcomes[o].Inc() }

// countNearLimit counts an admission that left the key under
// nearLimitShare of its limit.
func (m *zoneMetrics) countNearLimit() { m.nearLimit.Inc() }

// countDenyCacheHit counts a denial the deny cache answered, without Redis.
func (m *zoneMetrics) countDenyCacheHit() { m.denyCacheHits.Inc() }

// countBackendError counts a failed call to the Redis labelled redis, by
// cause (a cause of redis_errors.go, or circuit_open).
func (m *metrics) countBackendError(redis, cause string) {
	m.backendErrors.WithLabelValues(redis, cause).Inc()
}

// timeBackend records how long one call to a Redis took on its
// backend_duration_seconds (forRedis).
func timeBackend(duration prometheus.Observer, took time.Duration) {
	duration.Observe(took.Seconds())
}

// breakers are the circuit breakers of the Redis clients in use, with
// their Redis's label, read by the caddy_rate_limit_circuit_open gauge; a
// shared client adds its own and removes it when it closes.
var breakers sync.Map // *algorithms.Breaker → label string

// trackBreaker counts b, of the Redis labelled label, in the gauge until
// untrackBreaker.
func trackBreaker(b *algorithms.Breaker, label string) { breakers.Store(b, label) }

// untrackBreaker takes b out of the gauge (its client closed).
func untrackBreaker(b *algorithms.Breaker) { breakers.Delete(b) }

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

// resetSubscriptions are the reset subscriptions of the Redis clients in
// use, with their Redis's label, read by the
// caddy_rate_limit_reset_subscription_live gauge; a shared client adds its
// own and removes it when it closes.
var resetSubscriptions sync.Map // algorithms.Subscription → label string

// trackSubscription counts s, of the Redis labelled label, in the gauge
// until untrackSubscription.
func trackSubscription(s algorithms.Subscription, label string) { resetSubscriptions.Store(s, label) }

// untrackSubscription takes s out of the gauge (its client closed).
func untrackSubscription(s algorithms.Subscription) { resetSubscriptions.Delete(s) }

// leaseCounters are the quota lease counters of the leasing zones, by
// their key prefix (Zone.keyPrefix), for the lease holders' reports
// (observeQuotaLease). A zone's name keeps its counters across reloads;
// the map holds one entry per prefix ever configured.
var leaseCounters sync.Map // string → *quotaLeaseMetrics

// trackLeaseCounters makes m the counters of the zone keys under prefix.
func trackLeaseCounters(prefix string, m *quotaLeaseMetrics) { leaseCounters.Store(prefix, m) }

// leaseCountersOf are the counters of the zone keys under prefix, or nil.
func leaseCountersOf(prefix string) *quotaLeaseMetrics {
	m, _ := leaseCounters.Load(prefix)
	c, _ := m.(*quotaLeaseMetrics)
	return c
}

// subscriptionDesc is caddy_rate_limit_reset_subscription_live's description.
var subscriptionDesc = prometheus.NewDesc(prometheus.BuildFQName(ns, sub, "reset_subscription_live"),
	"1 while this instance is subscribed to the reset channel of the Redis labelled (other instances' resets and ban lifts reach its cached denials), else 0.", []string{"redis"}, nil)

// subscriptionGauge is caddy_rate_limit_reset_subscription_live{redis}:
// per Redis, 1 while every client talking to it is subscribed to its
// reset channel, 0 while one is not.
type subscriptionGauge struct{}

func (subscriptionGauge) Describe(ch chan<- *prometheus.Desc) { ch <- subscriptionDesc }

func (subscriptionGauge) Collect(ch chan<- prometheus.Metric) {
	live := map[string]float64{}
	resetSubscriptions.Range(func(s, label any) bool {
		l, _ := label.(string)
		if _, seen := live[l]; !seen {
			live[l] = 1
		}
		if s, ok := s.(interface{ Live() bool }); !ok || !s.Live() {
			live[l] = 0
		}
		return true
	})
	for l, v := range live {
		ch <- prometheus.MustNewConstMetric(subscriptionDesc, prometheus.GaugeValue, v, l)
	}
}

// adaptiveDecisions counts adaptive zones' decisions by zone, class (""
// without priority) and outcome: class names are configuration, so the
// family is bounded.
var adaptiveDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: ns,
	Subsystem: sub,
	Name:      "adaptive_decisions_total",
	Help:      "Decisions of adaptive zones, by zone, priority class and outcome (admitted, delayed, shed, dry_run_shed, client_left).",
}, []string{"zone", "class", "outcome"})

// countAdaptive counts an adaptive zone's decision as outcome, in class
// ("" without priority).
func countAdaptive(zone, class, outcome string) {
	adaptiveDecisions.WithLabelValues(zone, class, outcome).Inc()
}

// adaptiveGauges reports each adaptive zone's limit, in flight and
// baseline when scraped.
type adaptiveGauges struct{}

var (
	adaptiveLimitDesc    = prometheus.NewDesc(prometheus.BuildFQName(ns, sub, "adaptive_limit"), "An adaptive zone's limit of requests in flight (summed over its keys).", []string{"zone"}, nil)
	adaptiveInFlightDesc = prometheus.NewDesc(prometheus.BuildFQName(ns, sub, "adaptive_in_flight"), "Requests in flight in an adaptive zone.", []string{"zone"}, nil)
	adaptiveBaselineDesc = prometheus.NewDesc(prometheus.BuildFQName(ns, sub, "adaptive_baseline_seconds"), "An adaptive zone's baseline latency (its lowest over its keys).", []string{"zone"}, nil)
)

func (adaptiveGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- adaptiveLimitDesc
	ch <- adaptiveInFlightDesc
	ch <- adaptiveBaselineDesc
}

func (adaptiveGauges) Collect(ch chan<- prometheus.Metric) {
	liveShedZones.Lock()
	names := slices.Sorted(maps.Keys(liveShedZones.byName))
	liveShedZones.Unlock()
	for _, name := range names {
		limit, inFlight, baseline, ok := shedZoneState(name)
		if !ok {
			continue
		}
		ch <- prometheus.MustNewConstMetric(adaptiveLimitDesc, prometheus.GaugeValue, float64(limit), name)
		ch <- prometheus.MustNewConstMetric(adaptiveInFlightDesc, prometheus.GaugeValue, float64(inFlight), name)
		ch <- prometheus.MustNewConstMetric(adaptiveBaselineDesc, prometheus.GaugeValue, baseline.Seconds(), name)
	}
}

// registerAdaptiveMetrics registers the adaptive families on registry.
func registerAdaptiveMetrics(registry *prometheus.Registry) error {
	var err error
	register(registry, adaptiveDecisions, &err)
	register(registry, prometheus.Collector(adaptiveGauges{}), &err)
	return err
}

// delayMetrics are one max_delay zone's collectors: the waits it imposed
// and the waits its clients did not see through. Labels are zone names
// only, never keys.
type delayMetrics struct {
	waits     prometheus.Observer // seconds each delayed request was held for
	abandoned prometheus.Counter  // delayed requests whose client left first
}

// recordWait records a wait the zone imposed.
func (m *delayMetrics) recordWait(wait time.Duration) { m.waits.Observe(wait.Seconds()) }

// countAbandoned counts a delayed request whose client left before its turn.
func (m *delayMetrics) countAbandoned() { m.abandoned.Inc() }

// delayBuckets span a few ms to the longest useful max_delay of an
// interactive client; a longer wait counts in +Inf.
var delayBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// delayMetricsFor registers the delay collectors on registry (or takes
// those registered there before) and returns zone's; only a zone with
// max_delay asks, so that the series of others do not appear.
func delayMetricsFor(registry *prometheus.Registry, zone string) *delayMetrics {
	var err error // a clash with a foreign collector: the metrics go unregistered
	waits := register(registry, prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "delay_seconds",
		Help: "How long requests admitted with a reservation (max_delay) were held before being passed on.", Buckets: delayBuckets},
		[]string{"zone"}), &err)
	abandoned := register(registry, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "delay_abandoned_total",
		Help: "Requests held for max_delay whose client left before their turn (their reservation stays spent)."}, []string{"zone"}), &err)
	return &delayMetrics{waits: waits.WithLabelValues(zone), abandoned: abandoned.WithLabelValues(zone)}
}

// settleMetrics are one zone's counters of what it settles after responses.
// Labels are zone names only, never keys.
type settleMetrics struct {
	refunds prometheus.Counter // settlements that gave quota back
	debts   prometheus.Counter // settlements that took more than reserved
	slots   prometheus.Gauge   // concurrency slots this instance holds now (leases_held)
}

// settleMetricsFor registers the settlement collectors on registry (or
// takes those registered there before) and returns zone's.
func settleMetricsFor(registry *prometheus.Registry, zone string) settleMetrics {
	var err error // a clash with a foreign collector: the metrics go unregistered
	refunds := register(registry, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "refunds_total",
		Help: "Settlements after a response that gave quota back (count_status not matched, cost_from_response below the reservation)."}, []string{"zone"}), &err)
	debts := register(registry, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "debts_total",
		Help: "Settlements after a response that took more than was reserved (cost_from_response)."}, []string{"zone"}), &err)
	// leases_held, as it has always been named, counts concurrency slots
	slots := register(registry, prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "leases_held",
		Help: "Concurrency slots this instance holds: requests in flight."}, []string{"zone"}), &err)
	return settleMetrics{
		refunds: refunds.WithLabelValues(zone),
		debts:   debts.WithLabelValues(zone),
		slots:   slots.WithLabelValues(zone),
	}
}

// countRefund counts a settlement that gave quota back.
func (m settleMetrics) countRefund() { m.refunds.Inc() }

// countDebt counts a settlement that took more than was reserved.
func (m settleMetrics) countDebt() { m.debts.Inc() }

// addSlots adds n to the concurrency slots this instance holds.
func (m settleMetrics) addSlots(n float64) { m.slots.Add(n) }

// outcome is a decision outcome: a label value of
// caddy_rate_limit_decisions_total and the rate_limit.outcome of a span.
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
