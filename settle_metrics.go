package sluice

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

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
	const ns, sub = "caddy", "rate_limit"
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

// leasesTaken adds n to the leases gauge of each concurrency zone that
// took a lease.
func leasesTaken(zones []*Zone, reqs []algorithms.Request, ds []algorithms.Decision, n float64) {
	for i, z := range zones {
		if z.settle.lease && ds[i].Allowed && reqs[i].Lease != "" {
			z.settle.metrics.leases.Add(n)
		}
	}
}
