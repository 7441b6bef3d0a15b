package sluice

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/quota"
)

// recordingSpan is a span that records the attributes set on it.
type recordingSpan struct {
	noop.Span
	attrs map[attribute.Key]attribute.Value
}

func (s *recordingSpan) IsRecording() bool { return true }

func (s *recordingSpan) SetAttributes(kv ...attribute.KeyValue) {
	for _, a := range kv {
		s.attrs[a.Key] = a.Value
	}
}

// observeCase is one decision handed to the observer, and what it must
// record of it.
type observeCase struct {
	name          string
	handlerDryRun bool
	failed        string                // the failure_mode that decided, if any
	ds            []algorithms.Decision // nil: undecided
	err           error                 // the backend's
	rejected      bool                  // observe's answer
	outcome       string                // the zone's counted outcome and the span's; "" records nothing
	retry         int64                 // the span's rate_limit.retry_after; 0: absent
	logs          []string              // the log lines written
	top           bool                  // the denial is counted in the zone's top offenders
}

var observeCases = []observeCase{
	{name: "allowed", ds: []algorithms.Decision{{Allowed: true, Remaining: 5}}, outcome: "allowed"},
	{name: "allowed from quota leases", ds: []algorithms.Decision{{Allowed: true, Remaining: 5, Leased: true}}, outcome: "allowed"},
	{name: "delayed", ds: []algorithms.Decision{{Allowed: true, Delay: time.Second}}, outcome: "delayed"},
	{name: "delayed under the handler's dry_run passes at once", handlerDryRun: true,
		ds: []algorithms.Decision{{Allowed: true, Delay: time.Second}}, outcome: "allowed"},
	{name: "denied", ds: []algorithms.Decision{{RetryAfter: 2500 * time.Millisecond}}, rejected: true,
		outcome: "denied", retry: 3, logs: []string{"rate limit exceeded"}, top: true},
	{name: "banned", ds: []algorithms.Decision{{Banned: true, RetryAfter: time.Minute}}, rejected: true,
		outcome: "banned", retry: 60, logs: []string{"rate limit exceeded"}, top: true},
	{name: "denied under the handler's dry_run", handlerDryRun: true, ds: []algorithms.Decision{{RetryAfter: time.Second}},
		outcome: "dry_run_denied", logs: []string{"dry run: zone would deny"}},
	{name: "failed open", failed: failOpen, outcome: "failed_open"},
	{name: "failed closed", failed: failClosed, err: caddyhttp.Error(http.StatusServiceUnavailable, errTestStore), outcome: "failed_closed"},
	{name: "local, admitted", failed: failLocal, ds: []algorithms.Decision{{Allowed: true, Remaining: 5}}, outcome: "local"},
	{name: "local, denied", failed: failLocal, ds: []algorithms.Decision{{RetryAfter: time.Second}}, rejected: true,
		outcome: "local", retry: 1, logs: []string{"rate limit exceeded"}},
	{name: "client left", err: errClientLeft},
}

// errTestStore stands for a store's failure.
var errTestStore = errors.New("store failed")

// TestObserve: the observer records each kind of decision once: the
// zone's outcome counter, the span's attributes (never the key), the log
// lines, and a denial in the zone's top offenders; and it tells ServeHTTP
// whether the request is rejected.
func TestObserve(t *testing.T) {
	for _, tt := range observeCases {
		t.Run(tt.name, func(t *testing.T) {
			h, v := observedVerdict(t, tt)
			core, logs := observer.New(zapcore.InfoLevel)
			h.logger = zap.New(core)
			span := &recordingSpan{attrs: map[attribute.Key]attribute.Value{}}
			ctx := trace.ContextWithSpan(context.Background(), span)

			o := h.observe(ctx, &v, nil, tt.err)

			if got, want := o.rejected, tt.rejected; got != want {
				t.Errorf("rejected: got %v, want %v", got, want)
			}
			if tt.rejected && o.denied != 0 {
				t.Errorf("denying zone: got %d, want 0", o.denied)
			}
			z := h.zones[0]
			for i, name := range outcomeNames {
				want := 0.0
				if name == tt.outcome {
					want = 1
				}
				if got := testutilValue(t, z.metrics.outcomes[i]); got != want {
					t.Errorf("decisions{outcome=%s}: got %v, want %v", name, got, want)
				}
			}
			checkObservedSpan(t, span, z.name, tt)
			var lines []string
			for _, e := range logs.All() {
				lines = append(lines, e.Message)
			}
			if got, want := len(lines), len(tt.logs); got != want || (want > 0 && lines[0] != tt.logs[0]) {
				t.Errorf("log lines: got %q, want %q", lines, tt.logs)
			}
			if got, want := topCount(z, "k"), tt.top; got != want {
				t.Errorf("counted in the top offenders: got %v, want %v", got, want)
			}
		})
	}
}

// observedVerdict is a handler with one zone in memory, and the verdict of
// a request on it keyed "k" decided as tt says.
func observedVerdict(t *testing.T, tt observeCase) (*Handler, verdict) {
	t.Helper()
	h := newHandler(t, rateLimit(zoneCfg(uniqueZone("observe"), "key {http.request.header.X-Key}", "events 10", "window 1m")))
	h.DryRun = tt.handlerDryRun
	z := h.zones[0]
	v := verdict{zones: h.zones, reqs: []algorithms.Request{{Key: z.storeKey("k"), Limit: z.limit, Cost: 1}}, ds: tt.ds, failed: tt.failed}
	if tt.ds != nil {
		v.denied = !algorithms.Admitted(v.reqs, v.ds)
	}
	return h, v
}

// checkObservedSpan checks the span's attributes: none when nothing is
// recorded, else the zone, the outcome, the remaining when the request
// was decided, leased when quota leases admitted it, the Retry-After of a
// rejection, and nothing else.
func checkObservedSpan(t *testing.T, span *recordingSpan, zone string, tt observeCase) {
	t.Helper()
	if tt.outcome == "" {
		if len(span.attrs) != 0 {
			t.Errorf("span attributes: got %v, want none", span.attrs)
		}
		return
	}
	want := map[attribute.Key]attribute.Value{
		"rate_limit.zones":   attribute.StringSliceValue([]string{zone}),
		"rate_limit.outcome": attribute.StringValue(traceOutcome(tt)),
	}
	if tt.ds != nil {
		want["rate_limit.remaining"] = attribute.Int64Value(max(0, tt.ds[0].Remaining))
	}
	if tt.ds != nil && tt.ds[0].Leased {
		want["rate_limit.leased"] = attribute.BoolValue(true)
	}
	if tt.retry > 0 {
		want["rate_limit.retry_after"] = attribute.Int64Value(tt.retry)
	}
	if got := len(span.attrs); got != len(want) {
		t.Errorf("span attributes: got %v, want %v", span.attrs, want)
	}
	for k, w := range want {
		if got := span.attrs[k]; got != w {
			t.Errorf("span %s: got %v, want %v", k, got.String(), w.String())
		}
	}
}

// traceOutcome is the span's outcome of tt: its counted outcome, but a
// rejection under failure_mode local is traced as the rejection it is.
func traceOutcome(tt observeCase) string {
	if tt.failed == failLocal && tt.rejected {
		return "denied"
	}
	return tt.outcome
}

// topCount reports whether z's top offenders (in memory) count key.
func topCount(z *Zone, key string) bool {
	for _, c := range z.top.window.TopAt(time.Now(), 0) {
		if c.Key == keyHash(z.storeKey(key)) {
			return true
		}
	}
	return false
}

// TestObserveNothingMatched: a request no zone matched records nothing.
func TestObserveNothingMatched(t *testing.T) {
	h := newHandler(t, rateLimit(zoneCfg(uniqueZone("observe"), "key k", "events 1", "window 1m")))
	span := &recordingSpan{attrs: map[attribute.Key]attribute.Value{}}
	var v verdict
	if o := h.observe(trace.ContextWithSpan(context.Background(), span), &v, nil, nil); o.rejected {
		t.Error("rejected: got true, want false")
	}
	if len(span.attrs) != 0 {
		t.Errorf("span attributes: got %v, want none", span.attrs)
	}
	for i, name := range outcomeNames {
		if got := testutilValue(t, h.zones[0].metrics.outcomes[i]); got != 0 {
			t.Errorf("decisions{outcome=%s}: got %v, want 0", name, got)
		}
	}
}

// TestObserveTopKeyWithLogKey: with log_key a denial counts in the top
// offenders under the expanded key, not its hash.
func TestObserveTopKeyWithLogKey(t *testing.T) {
	h, v := observedVerdict(t, observeCases[4]) // denied
	h.LogKey, h.logger = true, zap.NewNop()
	v.keys = []string{"client-1"}
	h.observe(context.Background(), &v, nil, nil)
	found := false
	for _, c := range h.zones[0].top.window.TopAt(time.Now(), 0) {
		found = found || c.Key == "client-1"
	}
	if !found {
		t.Errorf("top offenders: %v, want the expanded key client-1", h.zones[0].top.window.TopAt(time.Now(), 0))
	}
}

// TestObserveQuotaLeases: the lease holders' reports reach the counters
// of the zone whose key prefix the key has: units by kind, and a grant
// per report of granted units; a key of another prefix counts nothing.
func TestObserveQuotaLeases(t *testing.T) {
	m, err := newMetrics(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	name := uniqueZone("observe_ql")
	zm := m.forZone(name, true)
	leaseCounters.Store("sluice:"+name+":", zm.quotaLeases)
	key := "sluice:" + name + ":{abcdefghijklmnopqrstuv}:v2"
	observeQuotaLease(key, quota.LeaseGranted, 40)
	observeQuotaLease(key, quota.LeaseUsed, 3)
	observeQuotaLease(key, quota.LeaseUsed, 3)
	observeQuotaLease(key, quota.LeaseReturned, 30)
	observeQuotaLease(key, quota.LeaseExpired, 4)
	observeQuotaLease("sluice:other:{abcdefghijklmnopqrstuv}:v2", quota.LeaseUsed, 9)
	for kind, want := range map[string]float64{"granted": 40, "used": 6, "returned": 30, "expired": 4} {
		if got := testutilValue(t, m.quotaLeaseUnits.WithLabelValues(name, kind)); got != want {
			t.Errorf("quota_lease_units_total{kind=%s}: got %v, want %v", kind, got, want)
		}
	}
	if got := testutilValue(t, m.quotaLeases.WithLabelValues(name)); got != 1 {
		t.Errorf("quota_lease_grants_total: got %v, want 1", got)
	}
}
