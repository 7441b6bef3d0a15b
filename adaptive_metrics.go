package sluice

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// adaptiveDecisions counts adaptive zones' decisions by zone, class (""
// without priority) and outcome: class names are configuration, so the
// family is bounded.
var adaptiveDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "caddy",
	Subsystem: "rate_limit",
	Name:      "adaptive_decisions_total",
	Help:      "Decisions of adaptive zones, by zone, priority class and outcome (admitted, delayed, shed, dry_run_shed, client_left).",
}, []string{"zone", "class", "outcome"})

// liveShedZones are the adaptive zones in force, by name (the newest
// provision's limiters), that the gauges and the admin API read.
var liveShedZones = struct {
	sync.Mutex
	byName map[string]*limiterSet
}{byName: make(map[string]*limiterSet)}

func publishShedZone(name string, s *limiterSet) {
	liveShedZones.Lock()
	defer liveShedZones.Unlock()
	liveShedZones.byName[name] = s
}

func withdrawShedZone(name string, s *limiterSet) {
	liveShedZones.Lock()
	defer liveShedZones.Unlock()
	if liveShedZones.byName[name] == s {
		delete(liveShedZones.byName, name)
	}
}

// shedZoneState is an adaptive zone's state in force, summed over its
// limiters (key values); ok false when no such zone is in force.
func shedZoneState(name string) (limit, inFlight int, baseline time.Duration, ok bool) {
	liveShedZones.Lock()
	s := liveShedZones.byName[name]
	liveShedZones.Unlock()
	if s == nil {
		return 0, 0, 0, false
	}
	st, _ := s.states(time.Now())
	return st.Limit, st.InFlight, st.Baseline, true
}

// adaptiveGauges reports each adaptive zone's limit, in flight and
// baseline when scraped.
type adaptiveGauges struct{}

var (
	adaptiveLimitDesc    = prometheus.NewDesc("caddy_rate_limit_adaptive_limit", "An adaptive zone's limit of requests in flight (summed over its keys).", []string{"zone"}, nil)
	adaptiveInFlightDesc = prometheus.NewDesc("caddy_rate_limit_adaptive_in_flight", "Requests in flight in an adaptive zone.", []string{"zone"}, nil)
	adaptiveBaselineDesc = prometheus.NewDesc("caddy_rate_limit_adaptive_baseline_seconds", "An adaptive zone's baseline latency (its lowest over its keys).", []string{"zone"}, nil)
)

func (adaptiveGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- adaptiveLimitDesc
	ch <- adaptiveInFlightDesc
	ch <- adaptiveBaselineDesc
}

func (adaptiveGauges) Collect(ch chan<- prometheus.Metric) {
	liveShedZones.Lock()
	names := sortedKeys(liveShedZones.byName)
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

// countShed counts an adaptive zone's decision, and notes when the zone
// starts or stops shedding for its log line.
func (h *Handler) countShed(z *Zone, class int, outcome string) {
	if !h.DisableMetrics {
		adaptiveDecisions.WithLabelValues(z.name, z.classes.name(class), outcome).Inc()
	}
	z.shed.noteShedding(h, outcome == shedShed || outcome == shedDryRun)
}
