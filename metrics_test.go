package sluice

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
	"github.com/sluicehq/caddy-sluice/quota"
)

// testutilValue reads a counter's or gauge's value.
func testutilValue(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Fatalf("metric %v is neither a counter nor a gauge", c.Desc())
	return 0
}

// sampleCount is a histogram's number of observations.
func sampleCount(t *testing.T, o prometheus.Observer) uint64 {
	t.Helper()
	m, ok := o.(prometheus.Metric)
	if !ok {
		t.Fatalf("observer %T is no metric", o)
	}
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetHistogram().GetSampleCount()
}

// circuitOpenOf is caddy_rate_limit_circuit_open{redis=label}, or -1 when
// the gauge has no such series.
func circuitOpenOf(t *testing.T, label string) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	go func() { circuitGauge{}.Collect(ch); close(ch) }()
	got := -1.0
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		if pb.GetLabel()[0].GetValue() == label {
			got = pb.GetGauge().GetValue()
		}
	}
	return got
}

// TestBackendMetricsPerRedis: with one live Redis and one that refuses
// connections, the backend metrics tell them apart by their redis label;
// the refused connections count as cause connection at once (not as the
// decision's timeout), and every failed-open decision is counted as an
// error of some cause: connection while calls are made, circuit_open once
// the breaker keeps them from Redis.
func TestBackendMetricsPerRedis(t *testing.T) {
	live := redistest.Start(t)
	dead := closedPort(t)
	handler := func(addr string) *Handler {
		return newHandler(t, "rate_limit {\n\tredis {\n\t\turl redis://"+addr+"\n\t\ttimeout 300ms\n\t}\n\tzone "+
			uniqueZone("perredis")+" {\n\t\tkey k\n\t\tevents 1000\n\t\twindow 1m\n\t}\n}")
	}
	hLive, hDead := handler(live.Addr), handler(dead)
	if hLive.backend.shared().label != live.Addr || hDead.backend.shared().label != dead {
		t.Fatalf("labels: got %q and %q, want %q and %q", hLive.backend.shared().label, hDead.backend.shared().label, live.Addr, dead)
	}
	m := hDead.backend.(*redisBackend).metrics
	count := func(label, cause string) float64 {
		return testutil.ToFloat64(m.backendErrors.WithLabelValues(label, cause))
	}
	calls := func(label string) uint64 {
		var pb dto.Metric
		if err := m.backendDuration.WithLabelValues(label).(prometheus.Metric).Write(&pb); err != nil {
			t.Fatal(err)
		}
		return pb.GetHistogram().GetSampleCount()
	}
	const n = 20
	for range n { // a refusal that waited for the 300ms timeout counts as cause timeout
		if res := serveNext(t, hDead, respondWith(http.StatusOK)); res.next != 1 { // failure_mode open
			t.Fatalf("request with Redis refusing: got %d calls of next, want 1 (err %v)", res.next, res.err)
		}
	}
	failedOpen := testutil.ToFloat64(hDead.zones[0].metrics.outcomes[outcomeFailedOpen])
	conn, open, timeout := count(dead, "connection"), count(dead, "circuit_open"), count(dead, "timeout")
	t.Logf("%v failed open: connection %v, circuit_open %v, timeout %v", failedOpen, conn, open, timeout)
	if failedOpen != n || conn+open != n || conn == 0 || open == 0 || timeout != 0 {
		t.Errorf("dead Redis: %v failed open, errors connection %v + circuit_open %v (timeout %v); want %d = connection + circuit_open, both > 0, no timeout",
			failedOpen, conn, open, timeout, n)
	}
	if got := calls(dead); got != uint64(conn) {
		t.Errorf("calls timed on the dead Redis: got %d, want %v (one per refused call, none for the breaker's)", got, conn)
	}
	if got := circuitOpenOf(t, dead); got != 1 {
		t.Errorf("circuit_open{redis=%q}: got %v, want 1", dead, got)
	}

	before := calls(live.Addr)
	for range 3 {
		if res := serveNext(t, hLive, respondWith(http.StatusOK)); res.next != 1 {
			t.Fatalf("request on the live Redis: got %d calls of next (err %v)", res.next, res.err)
		}
	}
	if got := calls(live.Addr) - before; got != 3 {
		t.Errorf("calls timed on the live Redis: got %d, want 3", got)
	}
	for _, cause := range append(callCauses, "circuit_open") {
		if got := count(live.Addr, cause); got != 0 {
			t.Errorf("errors of the live Redis, cause %s: got %v, want 0", cause, got)
		}
	}
	if got := circuitOpenOf(t, live.Addr); got != 0 {
		t.Errorf("circuit_open{redis=%q}: got %v, want 0", live.Addr, got)
	}
}

// TestQuotaLeaseMetrics: caddy_rate_limit_quota_lease_units_total{zone,
// kind} and caddy_rate_limit_quota_lease_grants_total{zone} are on the
// config's registry; a leasing zone's handles count each kind (the
// holder's returned and expired among them) and ignore other kinds; a
// zone that does not lease has no series and counts nothing.
func TestQuotaLeaseMetrics(t *testing.T) {
	ctx := testContext(t)
	m, err := newMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leasing, plain := uniqueZone("ql_metrics"), uniqueZone("ql_metrics_off")
	zm, off := m.forZone(leasing, true), m.forZone(plain, false)
	zm.quotaLeases.add(quota.LeaseReturned, 5)
	zm.quotaLeases.add(quota.LeaseExpired, 2)
	zm.quotaLeases.add(quota.LeaseExpired, 1)
	zm.quotaLeases.add(quota.LeaseRefused, 7)
	zm.quotaLeases.add(quota.LeaseEvent(9), 9)
	zm.quotaLeases.add(quota.LeaseUsed, 0)
	if off.quotaLeases != nil {
		t.Error("a zone that does not lease has quota lease counters")
	}

	families, err := ctx.GetMetricsRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{} // family/zone/kind → value
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "caddy_rate_limit_quota_lease_") {
			continue
		}
		for _, metric := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range metric.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["zone"] == leasing || labels["zone"] == plain {
				got[f.GetName()+"/"+labels["zone"]+"/"+labels["kind"]] = metric.GetCounter().GetValue()
			}
		}
	}
	want := map[string]float64{
		"caddy_rate_limit_quota_lease_units_total/" + leasing + "/granted":  0,
		"caddy_rate_limit_quota_lease_units_total/" + leasing + "/used":     0,
		"caddy_rate_limit_quota_lease_units_total/" + leasing + "/returned": 5,
		"caddy_rate_limit_quota_lease_units_total/" + leasing + "/expired":  3,
		"caddy_rate_limit_quota_lease_units_total/" + leasing + "/refused":  7,
		"caddy_rate_limit_quota_lease_grants_total/" + leasing + "/":        0,
	}
	if len(got) != len(want) {
		t.Errorf("series: got %v, want %v", got, want)
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("%s: got %v (present %v), want %v", k, g, ok, w)
		}
	}
}
