package sluice

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

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
	if hs.n == 0 || !span.IsRecording() {
		return
	}
	names := make([]string, 0, len(v.zones)+hs.n)
	i := 0
	hs.each(func(s *heldSlot) {
		for ; i < len(v.zones) && v.zones[i].name < s.z.name; i++ {
			names = append(names, v.zones[i].name)
		}
		names = append(names, s.z.name)
	})
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
	hs.each(func(s *heldSlot) {
		least = minRemaining(least, int64(s.slot.Remaining()))
		switch {
		case s.outcome == shedDryRun && (outcome == outcomeNames[outcomeAllowed] || outcome == outcomeNames[outcomeDelayed]):
			outcome = shedDryRun
		case s.outcome == shedDelayed && outcome == outcomeNames[outcomeAllowed]:
			outcome = shedDelayed
		}
	})
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
