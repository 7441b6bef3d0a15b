package sluice

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/quota"
)

// The observer of a decision: ServeHTTP hands it each request's verdict
// once, as the backend returned it, and it alone counts the decision
// (caddy_rate_limit_decisions_total and the zones' counters, metrics.go),
// adds it to the request's span, logs it (the sampled rejection line, the
// dry-run line), emits its events, records the wait it imposes (max_delay)
// and feeds the zones' top offenders (top.go, each zone's counter chosen
// with its backend). The Redis calls, the shed answers of adaptive zones
// and their events are recorded here too; every collector is written
// through metrics.go. It reads the handler's settings where they live:
// dry_run and log_key.

// nearLimitShare is the share of a zone's limit under which an admitted
// request counts as near the limit.
const nearLimitShare = 0.2

// newZoneObserver is zone name's observer, its counters taken from m
// (those of quota leases when leases), its denials counted in the top
// offenders its store shares (sharedTop), else in memory.
func newZoneObserver(m *metrics, name string, leases, sharedTop bool) zoneObserver {
	top := topFor(name)
	return zoneObserver{
		metrics:   m.forZone(name, leases),
		dryRunLog: &throttle{interval: logInterval},
		rejectLog: &throttle{interval: logInterval},
		top:       top,
		topCounts: top.counter(sharedTop),
	}
}

// observed is how a request's decision ended, as ServeHTTP acts on it.
type observed struct {
	rejected bool          // a zone that is not a dry run denied, and the handler rejects
	denied   int           // when rejected: the zone of the verdict that denies for longest
	retry    time.Duration // when rejected: the Retry-After sent (jitter included, whole seconds)
	wait     time.Duration // when admitted: how long it is held for its turn (max_delay)
}

// retrySeconds is the Retry-After sent, in seconds; 0 when admitted.
func (o observed) retrySeconds() int64 { return int64(o.retry / time.Second) }

// observe records the request's decisions, once per request: the
// adaptive zones' (slots: nil without them), and when none shed it, the
// store's of v (err is the backend's). It returns whether the request is
// rejected, by which zone and with what Retry-After, or, admitted, how
// long it waits for its turn.
func (h *Handler) observe(ctx context.Context, v *verdict, slots *heldSlots, err error) observed {
	if slots != nil {
		for _, s := range slots.list {
			h.countShed(s.z, s.class, s.outcome)
		}
		if slots.wasShed() {
			h.observeShed(ctx, slots.shed)
			return observed{}
		}
	}
	o := h.observeStore(ctx, v, err)
	if slots.held() {
		h.traceSlots(ctx, slots, v, o)
	}
	return o
}

// observeStore records the store's decision on v: err is the backend's.
// A request no store zone matched, or whose client left before its
// decision, has nothing to record.
func (h *Handler) observeStore(ctx context.Context, v *verdict, err error) observed {
	if len(v.zones) == 0 || errors.Is(err, errClientLeft) {
		return observed{}
	}
	var o observed
	if v.ds != nil && v.denied && !h.DryRun {
		o.rejected = true
		o.denied, o.retry = h.denial(v)
	}
	if o.rejected {
		h.logRejection(v, o.denied, o.retry)
		h.logBans(v)
		if err == nil { // else refused (failure_mode), not rejected
			h.emitRejection(v, o.denied, o.retry)
		}
	}
	traceDecision(ctx, v, h.outcomeOf(v, o), o.retrySeconds())
	switch v.failed {
	case failOpen:
		countFailed(v.zones, outcomeFailedOpen)
	case failClosed:
		countFailed(v.zones, outcomeFailedClosed)
	case failLocal:
		countFailed(v.zones, outcomeLocal)
	default:
		h.countDecisions(v)
	}
	if !o.rejected && err == nil {
		o.wait = heldFor(v, h.DryRun)
		observeWait(v, o.wait)
	}
	return o
}

// outcomeOf is the outcome of the request v, o: what its span records.
func (h *Handler) outcomeOf(v *verdict, o observed) outcome {
	switch {
	case v.failed == failOpen:
		return outcomeFailedOpen
	case v.failed == failClosed:
		return outcomeFailedClosed
	case o.rejected:
		return rejectedOutcome(v)
	}
	return admittedOutcome(v, h.DryRun)
}

// countDecisions records the store's decisions of v in each zone's
// counters; a denial feeds the zone's top offenders, and a dry-run denial
// the zone's dry-run log.
func (h *Handler) countDecisions(v *verdict) {
	for i, z := range v.zones {
		d := v.ds[i]
		switch {
		case d.Allowed:
			z.metrics.count(allowedOutcome(d, h.DryRun))
			if float64(d.Remaining) < nearLimitShare*float64(v.capacity(i)) {
				z.metrics.countNearLimit()
			}
		case z.DryRun || h.DryRun:
			z.metrics.count(outcomeDryRunDenied)
			h.logDryRun(z)
		case d.Banned:
			z.metrics.count(outcomeBanned)
			v.countTop(i)
		default:
			z.metrics.count(outcomeDenied)
			v.countTop(i)
		}
		if d.Cached && !d.Allowed && !z.DryRun {
			z.metrics.countDenyCacheHit()
		}
	}
}

// countFailed records requests decided by failure_mode, as o.
func countFailed(zones []*Zone, o outcome) {
	for _, z := range zones {
		z.metrics.count(o)
	}
}

// countTop counts zone i's denial of v in the zone's top offenders:
// cached denials and bans included, the trip and every banned request
// after it, so the keys a flood or a ban stopped are the ones listed.
func (v *verdict) countTop(i int) {
	if c := v.zones[i].topCounts; c != nil {
		c.Add(v.topKeyOf(i), 1)
	}
}

// topKeyOf is the key zone i's denial counts under: the store key's hash
// (the `pk` of the RateLimit header), or with the handler's log_key (the
// verdict then holds the expanded keys) the expanded key.
func (v *verdict) topKeyOf(i int) string {
	if v.keys != nil {
		return v.keys[i]
	}
	return keyHash(v.reqs[i].Key)
}

// logDryRun logs, at most once per logInterval, that zone z would have
// denied requests, and how many since its last line.
func (h *Handler) logDryRun(z *Zone) {
	if n, ok := z.dryRunLog.tickAt(time.Now()); ok {
		h.logger.Info("dry run: zone would deny", zap.String("zone", z.name), zap.Int("requests", n))
	}
}

// logRejection logs a sample of the zone's rejections, at info: at most
// one line per logInterval per zone, for the first rejection of the
// interval, with how many it stands for (those since the last line); the
// key only with log_key (keys may be secrets).
func (h *Handler) logRejection(v *verdict, denied int, retry time.Duration) {
	z := v.zones[denied]
	n, ok := z.rejectLog.tickAt(time.Now())
	if !ok {
		return
	}
	fields := []zap.Field{zap.String("zone", z.name), zap.Float64("retry_after", retry.Seconds()), zap.Int("requests", n)}
	if h.LogKey {
		fields = append(fields, zap.String("key", v.keys[denied]))
	}
	h.logger.Info("rate limit exceeded", fields...)
}

// logBans logs the bans v's rejection started (rare: one per key and
// ban), at info: at most one line per logInterval per zone, with the
// ban's length, how many bans it stands for (those started since the
// zone's last line) and, only with log_key, the key of this one. The
// event rate_limit_banned is emitted for each.
func (h *Handler) logBans(v *verdict) {
	for i, d := range v.ds {
		if !d.Banned || !d.BanStarted {
			continue
		}
		z := v.zones[i]
		n, ok := banLogOf(z.name).tickAt(time.Now())
		if !ok {
			continue
		}
		fields := []zap.Field{zap.String("zone", z.name), zap.Float64("ban_seconds", time.Duration(z.Ban).Seconds()), zap.Int("bans", n)}
		if h.LogKey {
			fields = append(fields, zap.String("key", v.keys[i]))
		}
		h.logger.Info("rate limit ban started", fields...)
	}
}

// banLogs throttle the ban lines of each zone name (zones are global:
// handlers that declare one share its bans), kept across reloads; one
// entry per zone name ever configured.
var banLogs sync.Map // string → *throttle

// banLogOf is zone name's ban line throttle.
func banLogOf(name string) *throttle {
	if t, ok := banLogs.Load(name); ok {
		return t.(*throttle)
	}
	t, _ := banLogs.LoadOrStore(name, &throttle{interval: logInterval})
	return t.(*throttle)
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

// admittedOutcome is the outcome of v, admitted (or let through by the
// handler's dry_run).
func admittedOutcome(v *verdict, handlerDryRun bool) outcome {
	if v.failed == failLocal {
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

// rejectedOutcome is the outcome of v, rejected: banned when a zone's ban
// denies it, else denied.
func rejectedOutcome(v *verdict) outcome {
	for _, d := range v.ds {
		if d.Banned {
			return outcomeBanned
		}
	}
	return outcomeDenied
}

// traceDecision adds the decision to the request's span, when Caddy's
// tracing handler made one that records: rate_limit.zones (the zones that
// matched), rate_limit.outcome (allowed, delayed, denied, banned,
// dry_run_denied, failed_open, failed_closed, local), rate_limit.remaining
// (the least of the zones'), on an admission from quota leases (in
// process, without Redis) rate_limit.leased (true), and on a rejection
// rate_limit.retry_after (seconds). Keys are never added: they may be
// secrets, and log_key is for logs.
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
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, attribute.StringSlice("rate_limit.zones", names), attribute.String("rate_limit.outcome", outcomeNames[o]))
	if ds := v.ds; len(ds) > 0 {
		least := ds[0].Remaining
		for _, d := range ds[1:] {
			least = min(least, d.Remaining)
		}
		attrs = append(attrs, attribute.Int64("rate_limit.remaining", max(0, least))) // a debt reads 0, as in the headers
		// every zone's or none: a request is leased all or nothing
		if ds[0].Leased {
			attrs = append(attrs, attribute.Bool("rate_limit.leased", true))
		}
	}
	if retrySeconds > 0 {
		attrs = append(attrs, attribute.Int64("rate_limit.retry_after", retrySeconds))
	}
	span.SetAttributes(attrs...)
}

// observeBackend records one call to the Redis labelled redis, whose
// backend_duration_seconds is duration (forRedis); answers from the deny
// cache are not calls, and a decision the open breaker kept
// from Redis counts as an error of cause circuit_open (no duration): every
// decision failure_mode takes is counted as an error of some cause.
func (m *metrics) observeBackend(redis string, duration prometheus.Observer, took time.Duration, ds []algorithms.Decision, err error) {
	if errors.Is(err, algorithms.ErrCircuitOpen) {
		m.countBackendError(redis, "circuit_open")
		return
	}
	for _, d := range ds {
		if d.Cached {
			return
		}
	}
	timeBackend(duration, took)
	if err != nil {
		m.countBackendError(redis, cause(err))
	}
}

// observeSettleFailure records settlements that the Redis labelled redis
// failed to take, as an error of err's cause.
func (m *metrics) observeSettleFailure(redis string, err error) {
	m.countBackendError(redis, cause(err))
}

// denial is the zone of v that denies for longest and the Retry-After
// sent for it (jitter included, whole seconds).
func (h *Handler) denial(v *verdict) (int, time.Duration) {
	denied := -1
	var retry time.Duration
	for i, d := range v.ds {
		if v.denies(i) && d.RetryAfter >= retry {
			denied, retry = i, d.RetryAfter
		}
	}
	return denied, jitteredRetry(retry, h.Jitter)
}

// jitteredRetry is the Retry-After sent for retry: whole seconds, rounded
// up and at least 1, plus up to jitter×retry of random time.
func jitteredRetry(retry time.Duration, jitter float64) time.Duration {
	if jitter > 0 {
		retry += time.Duration(rand.Float64() * jitter * float64(retry))
	}
	return max(time.Second, (retry+time.Second-1)/time.Second*time.Second)
}

// observeQuotaLease is the lease holders' report of units of a zone key's
// quota leases (quota.NewLeases): counted in the zone its key prefix
// names, whatever handler holds it.
func observeQuotaLease(key string, kind quota.LeaseEvent, units int64) {
	open := strings.LastIndexByte(key, '{')
	if open < 0 {
		return
	}
	if m := leaseCountersOf(key[:open]); m != nil {
		m.add(kind, units)
	}
}

// countShed counts an adaptive zone's decision, and notes when the zone
// starts or stops shedding for its log line.
func (h *Handler) countShed(z *Zone, class int, outcome string) {
	if !h.DisableMetrics {
		countAdaptive(z.name, z.classes.name(class), outcome)
	}
	z.shed.noteShedding(h.logger, outcome == shedShed || outcome == shedDryRun)
}

// observeShed counts, traces and announces (the rate_limit_exceeded
// event) a request that adaptive zone sh.z shed; one whose client left
// while it waited is counted and traced so, and announced to no one.
func (h *Handler) observeShed(ctx context.Context, sh shedding) {
	outcome := shedShed
	if sh.left {
		outcome = shedLeft
	}
	h.countShed(sh.z, sh.class, outcome)
	traceShed(ctx, sh.z, sh.class, outcome, int64(sh.remaining))
	if !sh.left && h.events.ShouldEmit(exceededEvent) {
		h.events.Emit(h.ctx, exceededEvent, map[string]any{"zone": sh.z.name, "retry_after": 1.0, "shed": true})
	}
}

// traceShed adds an adaptive zone's answer to the request's span, as
// traceDecision does for the store's: rate_limit.zones (the zone alone,
// as its headers), rate_limit.outcome (shed, or client_left when its
// client left while it waited), rate_limit.remaining (r of its class's
// share), rate_limit.retry_after on a shed answer, and rate_limit.class
// (the request's class) when the zone has priority classes.
func traceShed(ctx context.Context, z *Zone, class int, outcome string, remaining int64) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, attribute.StringSlice("rate_limit.zones", []string{z.name}), attribute.String("rate_limit.outcome", outcome),
		attribute.Int64("rate_limit.remaining", max(0, remaining)))
	if outcome == shedShed {
		attrs = append(attrs, attribute.Int64("rate_limit.retry_after", 1))
	}
	if z.classes.n() > 1 {
		attrs = append(attrs, attribute.String("rate_limit.class", z.classes.name(class)))
	}
	span.SetAttributes(attrs...)
}

// traceSlots adds the adaptive zones whose slots the request holds to
// its span, after traceDecision recorded the store's decision of v, o
// (if any zone of v matched): rate_limit.zones lists them all in name
// order, rate_limit.remaining is the least of all, and an outcome the
// store's zones left at allowed (or no store zone matched) becomes
// delayed when a slot was waited for (max_delay); allowed or delayed
// becomes dry_run_shed when a dry-run zone would have shed it.
func (h *Handler) traceSlots(ctx context.Context, hs *heldSlots, v *verdict, o observed) {
	span := trace.SpanFromContext(ctx)
	if len(hs.list) == 0 || !span.IsRecording() {
		return
	}
	names := make([]string, 0, len(v.zones)+len(hs.list))
	i := 0
	for _, s := range hs.list {
		for ; i < len(v.zones) && v.zones[i].name < s.z.name; i++ {
			names = append(names, v.zones[i].name)
		}
		names = append(names, s.z.name)
	}
	for ; i < len(v.zones); i++ {
		names = append(names, v.zones[i].name)
	}
	outcome := outcomeNames[outcomeAllowed]
	if len(v.zones) > 0 {
		outcome = outcomeNames[h.outcomeOf(v, o)]
	}
	least := int64(-1)
	for _, d := range v.ds {
		least = minRemaining(least, d.Remaining)
	}
	for _, s := range hs.list {
		least = minRemaining(least, int64(s.slot.Remaining()))
		switch {
		case s.outcome == shedDryRun && (outcome == outcomeNames[outcomeAllowed] || outcome == outcomeNames[outcomeDelayed]):
			outcome = shedDryRun
		case s.outcome == shedDelayed && outcome == outcomeNames[outcomeAllowed]:
			outcome = shedDelayed
		}
	}
	span.SetAttributes(attribute.StringSlice("rate_limit.zones", names), attribute.String("rate_limit.outcome", outcome),
		attribute.Int64("rate_limit.remaining", max(0, least)))
}

// minRemaining is the least of least (-1: none yet) and r.
func minRemaining(least, r int64) int64 {
	if least < 0 {
		return max(r, 0)
	}
	return min(least, max(r, 0))
}

// The events a rejection emits: exceededEvent for every rejection (a
// shed answer too), bannedEvent for a zone's trip into a ban.
const (
	exceededEvent = "rate_limit_exceeded"
	bannedEvent   = "rate_limit_banned"
)

// emitRejection emits rate_limit_exceeded for v's rejection by zone
// denied, Retry-After retry, and rate_limit_banned for each ban it
// started; their data is built only when something listens.
func (h *Handler) emitRejection(v *verdict, denied int, retry time.Duration) {
	if h.events.ShouldEmit(exceededEvent) {
		data := map[string]any{"zone": v.zones[denied].name, "retry_after": retry.Seconds()}
		if h.LogKey {
			data["key"] = v.keys[denied]
		}
		h.events.Emit(h.ctx, exceededEvent, data)
	}
	h.emitBans(v)
}

// emitBans emits rate_limit_banned for each zone of v whose ban this
// request started (once per ban: later and cached denials of the ban do
// not start it).
func (h *Handler) emitBans(v *verdict) {
	for i, d := range v.ds {
		if d.Banned && d.BanStarted && h.events.ShouldEmit(bannedEvent) {
			z := v.zones[i]
			data := map[string]any{"zone": z.name, "ban_seconds": time.Duration(z.Ban).Seconds()}
			if h.LogKey {
				data["key"] = v.keys[i]
			}
			h.events.Emit(h.ctx, bannedEvent, data)
		}
	}
}

// heldFor is how long the admitted request v waits for its turn: the
// longest delay of its zones; none under the handler's dry_run, which
// passes every request on at once.
func heldFor(v *verdict, handlerDryRun bool) time.Duration {
	var wait time.Duration
	if !handlerDryRun {
		for _, d := range v.ds {
			wait = max(wait, d.Delay)
		}
	}
	return wait
}

// observeWait records wait, the time the admitted request v is held for
// its turn (max_delay), in each zone of v that imposed one.
func observeWait(v *verdict, wait time.Duration) {
	if wait <= 0 {
		return
	}
	for i, z := range v.zones {
		if v.ds[i].Delay > 0 && z.delay != nil {
			z.delay.recordWait(wait)
		}
	}
}

// observeAbandoned records that the client of v left while its request
// waited for its turn (wait): each zone that imposed a wait counts it
// abandoned.
func (h *Handler) observeAbandoned(v *verdict, wait time.Duration) {
	for i, z := range v.zones {
		if v.ds[i].Delay > 0 && z.delay != nil {
			z.delay.countAbandoned()
		}
	}
	h.logger.Debug("client left while its request waited for its turn (max_delay)", zap.Duration("wait", wait))
}
