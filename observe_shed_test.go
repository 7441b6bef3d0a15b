package sluice

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// spanCtx is a context whose span records the attributes set on it.
func spanCtx(t *testing.T) (context.Context, *recordingSpan) {
	span := &recordingSpan{attrs: map[attribute.Key]attribute.Value{}}
	return trace.ContextWithSpan(t.Context(), span), span
}

func checkSpan(t *testing.T, what string, span *recordingSpan, want map[attribute.Key]attribute.Value) {
	t.Helper()
	if len(span.attrs) != len(want) {
		t.Errorf("%s: span attributes %v, want %v", what, span.attrs, want)
	}
	for k, w := range want {
		if got := span.attrs[k]; got != w {
			t.Errorf("%s: span %s = %s, want %s", what, k, got.String(), w.String())
		}
	}
}

// TestAdaptiveTrace: a shed request's span says shed, with its zone, r
// of its class's share, the Retry-After and its class; an admitted one
// lists the adaptive zone among the others, in name order, with the
// least remaining; one that waited for its slot says delayed.
func TestAdaptiveTrace(t *testing.T) {
	zone, rate := uniqueZone("a-shed"), uniqueZone("b-rate")
	h := newHandler(t, fmt.Sprintf("rate_limit {\n\tzone %s {\n\t\tkey static\n\t\talgorithm adaptive\n\t\tevents 2\n\t\tadaptive {\n\t\t\tmin 2\n\t\t}\n\t\tpriority {http.request.header.X-Tier} critical bulk\n\t\treserve 50%%\n\t\tmax_delay 1m\n\t}\n\tzone %s {\n\t\tkey static\n\t\tevents 100\n\t\twindow 1m\n\t}\n}", zone, rate))
	bulk := map[string]string{"X-Tier": "bulk"}
	release := make(chan struct{})

	ctx, span := spanCtx(t)
	held := start(h, ctx, bulk, release, ok200) // bulk's share: 1
	<-held.entered
	checkSpan(t, "admitted", span, map[attribute.Key]attribute.Value{
		"rate_limit.zones":     attribute.StringSliceValue([]string{zone, rate}),
		"rate_limit.outcome":   attribute.StringValue("allowed"),
		"rate_limit.remaining": attribute.Int64Value(0), // bulk's share of 1, taken
	})

	ctx, span = spanCtx(t)
	left, cancel := context.WithCancel(ctx)
	waiter := start(h, left, bulk, release, ok200)
	waitFor(t, "one waiting", func() bool { s, _ := h.shedZones[0].shed.set.states(time.Now()); return s.Waiting == 1 })
	cancel()
	<-waiter.done
	checkSpan(t, "client left while it waited", span, map[attribute.Key]attribute.Value{
		"rate_limit.zones":     attribute.StringSliceValue([]string{zone}),
		"rate_limit.outcome":   attribute.StringValue("client_left"),
		"rate_limit.remaining": attribute.Int64Value(0),
		"rate_limit.class":     attribute.StringValue("bulk"),
	})

	ctx, span = spanCtx(t)
	queued := start(h, ctx, bulk, release, ok200)
	waitFor(t, "one waiting", func() bool { s, _ := h.shedZones[0].shed.set.states(time.Now()); return s.Waiting == 1 })
	close(release)
	<-held.done
	<-queued.done
	if got := span.attrs["rate_limit.outcome"]; got != attribute.StringValue("delayed") {
		t.Errorf("admitted after a wait: outcome %s, want delayed", got.String())
	}
}

// TestAdaptiveTraceShed: a shed request's span.
func TestAdaptiveTraceShed(t *testing.T) {
	zone := uniqueZone("shed")
	h := shedHandler(t, zone, 2, "priority {http.request.header.X-Tier} critical bulk", "reserve 50%")
	release := make(chan struct{})
	held := start(h, t.Context(), map[string]string{"X-Tier": "critical"}, release, ok200)
	<-held.entered
	ctx, span := spanCtx(t)
	shed := start(h, ctx, map[string]string{"X-Tier": "bulk"}, release, ok200) // bulk's share: 1, taken
	<-shed.done
	checkSpan(t, "shed", span, map[attribute.Key]attribute.Value{
		"rate_limit.zones":       attribute.StringSliceValue([]string{zone}),
		"rate_limit.outcome":     attribute.StringValue("shed"),
		"rate_limit.remaining":   attribute.Int64Value(0),
		"rate_limit.retry_after": attribute.Int64Value(1),
		"rate_limit.class":       attribute.StringValue("bulk"),
	})
	close(release)
	<-held.done
}
