package sluice

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// traceDecision adds the decision to the request's span, when Caddy's
// tracing handler made one that records: rate_limit.zones (the zones that
// matched), rate_limit.outcome (allowed, delayed, denied, dry_run_denied,
// failed_open, failed_closed, local), rate_limit.remaining (the least of
// the zones') and, on a rejection, rate_limit.retry_after (seconds). Keys
// are never added: they may be secrets, and log_key is for logs.
func traceDecision(ctx context.Context, zones []*Zone, outcome string, ds []algorithms.Decision, retry time.Duration) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	names := make([]string, len(zones))
	for i, z := range zones {
		names[i] = z.name
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, attribute.StringSlice("rate_limit.zones", names), attribute.String("rate_limit.outcome", outcome))
	if len(ds) > 0 {
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

// admittedOutcome is the trace outcome of an admitted request (or of one
// the handler's dry_run let through).
func admittedOutcome(ds []algorithms.Decision, handlerDryRun, local bool) string {
	if local {
		return outcomeNames[outcomeLocal]
	}
	o := outcomeAllowed
	for _, d := range ds {
		if !d.Allowed {
			return outcomeNames[outcomeDryRunDenied]
		}
		if allowedOutcome(d, handlerDryRun) == outcomeDelayed {
			o = outcomeDelayed
		}
	}
	return outcomeNames[o]
}
