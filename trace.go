package sluice

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// traceDecision adds the decision to the request's span, when Caddy's
// tracing handler made one that records: rate_limit.zones (the zones that
// matched), rate_limit.outcome (allowed, delayed, denied, dry_run_denied,
// failed_open, failed_closed, local), rate_limit.remaining (the least of
// the zones') and, on a rejection, rate_limit.retry_after (seconds). Keys
// are never added: they may be secrets, and log_key is for logs.
//
// v's zones are the request's; its decisions, if any, give the remaining.
func traceDecision(ctx context.Context, v *verdict, outcome string, retry time.Duration) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	names := make([]string, len(v.zones))
	for i, z := range v.zones {
		names[i] = z.name
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, attribute.StringSlice("rate_limit.zones", names), attribute.String("rate_limit.outcome", outcome))
	if ds := v.ds; len(ds) > 0 {
		least := ds[0].Remaining
		for _, d := range ds[1:] {
			least = min(least, d.Remaining)
		}
		attrs = append(attrs, attribute.Int64("rate_limit.remaining", least))
	}
	if retry > 0 {
		attrs = append(attrs, attribute.Int64("rate_limit.retry_after", ceilSeconds(retry)))
	}
	span.SetAttributes(attrs...)
}

// admittedOutcome is the trace outcome of v, admitted (or let through by
// the handler's dry_run).
func admittedOutcome(v *verdict, handlerDryRun bool) string {
	if v.local {
		return outcomeNames[outcomeLocal]
	}
	o := outcomeAllowed
	for _, d := range v.ds {
		if !d.Allowed {
			return outcomeNames[outcomeDryRunDenied]
		}
		if allowedOutcome(d, handlerDryRun) == outcomeDelayed {
			o = outcomeDelayed
		}
	}
	return outcomeNames[o]
}
