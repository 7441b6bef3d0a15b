package sluice

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sluicehq/caddy-sluice/adaptive"
)

// Outcomes of an adaptive zone's decision (the outcome label of
// caddy_rate_limit_adaptive_decisions_total).
const (
	shedAdmitted = "admitted"
	shedDelayed  = "delayed"
	shedShed     = "shed"
	shedDryRun   = "dry_run_shed" // dry run: it would have been shed
	shedLeft     = "client_left"  // the client left while it waited
)

// heldSlot is a slot a request holds in one adaptive zone that matched
// it (match gives z, key and class, acquire the rest).
type heldSlot struct {
	z       *Zone
	key     string // z's key for the request
	class   int    // the request's priority class in z
	l       *adaptive.Limiter
	slot    adaptive.Slot
	outcome string // admitted, delayed (it waited) or dry_run_shed
}

// heldSlots are the slots a request holds, taken before any other zone
// decides; given back without a sample when Sluice rejects the request,
// released with its latency at its first response header, or when the
// next handler returns, panics or its client leaves.
type heldSlots struct {
	list  []heldSlot // on buf while it fits (newHeldSlots)
	buf   [4]heldSlot
	shed  shedding    // the zone that shed the request, if one did
	start time.Time   // the hand-off to the next handler
	done  atomic.Bool // released or given back
}

// shedding is an adaptive zone's shed answer: z shed the request (nil:
// none did), of class, whose share is share, remaining being what was
// left of it; left: its client left while it waited.
type shedding struct {
	z                       *Zone
	class, share, remaining int
	left                    bool
}

// newHeldSlots holds no slot yet; its first four cost no allocation.
func newHeldSlots() *heldSlots {
	hs := new(heldSlots)
	hs.list = hs.buf[:0]
	return hs
}

// acquire takes the request's slot in each adaptive zone that matched it
// (hs.list, from match), waiting for one (max_delay) best class first.
// When a zone sheds it, or its client leaves while it waits, the slots
// taken are given back and hs.shed says which zone. A dry run (dryRun:
// the handler's) takes a slot whether or not it fits.
func (hs *heldSlots) acquire(ctx context.Context, dryRun bool) {
	for i := range hs.list {
		s := &hs.list[i]
		z, now := s.z, time.Now()
		s.l = z.shed.set.limiter(s.key, now)
		if dryRun || z.DryRun {
			var fits bool
			s.slot, fits = s.l.ForceAt(now, s.class)
			s.outcome = map[bool]string{true: shedAdmitted, false: shedDryRun}[fits]
			continue
		}
		slot, ok := s.l.AcquireAt(now, s.class)
		outcome, left := shedAdmitted, false
		if !ok && z.MaxDelay > 0 {
			slot, ok, left = s.l.Wait(ctx, s.class, time.Duration(z.MaxDelay))
			outcome = shedDelayed
		}
		if !ok {
			share := s.l.Share(s.class)
			hs.shed = shedding{z: z, class: s.class, share: share, remaining: max(0, share-s.l.StateAt(time.Now()).InFlight), left: left}
			hs.list = hs.list[:i]
			hs.cancel()
			return
		}
		s.slot, s.outcome = slot, outcome
	}
}

// wasShed reports whether an adaptive zone shed the request (false for
// nil: a handler without adaptive zones).
func (hs *heldSlots) wasShed() bool { return hs != nil && hs.shed.z != nil }

// held reports whether hs holds a slot (false for nil: a handler without
// adaptive zones).
func (hs *heldSlots) held() bool { return hs != nil && len(hs.list) > 0 }

// cancel gives the slots back without a sample (Sluice rejected the
// request, or its client left before the hand-off).
func (hs *heldSlots) cancel() {
	if len(hs.list) == 0 || !hs.done.CompareAndSwap(false, true) {
		return
	}
	now := time.Now()
	for _, s := range hs.list {
		s.l.CancelAt(now, s.slot)
	}
}

// release gives the slots back with the request's latency.
func (hs *heldSlots) release(o adaptive.Outcome) {
	if len(hs.list) == 0 || !hs.done.CompareAndSwap(false, true) {
		return
	}
	now := time.Now()
	latency := now.Sub(hs.start)
	for _, s := range hs.list {
		s.l.ReleaseAt(now, s.slot, latency, o)
	}
}

// finish releases the slots, if no header did, once the next handler
// returned err (errPanicked while it panics): a client that left is
// abandoned, a 503 or 504 overloaded.
func (hs *heldSlots) finish(ctx context.Context, err error) {
	switch {
	case ctx.Err() != nil:
		hs.release(adaptive.Abandoned)
	case outcomeOfStatus(statusOfError(err)) == adaptive.Overloaded:
		hs.release(adaptive.Overloaded)
	default:
		hs.release(adaptive.Answered)
	}
}

func statusOfError(err error) int {
	if err == nil {
		return 0
	}
	var he caddyhttp.HandlerError
	if errors.As(err, &he) {
		return he.StatusCode
	}
	return 0
}

// outcomeOfStatus is what a response status says of the upstream: a 503
// or 504 overloaded; 499, a client that left first (reverse_proxy's
// answer then), abandoned; any other answered.
func outcomeOfStatus(status int) adaptive.Outcome {
	switch status {
	case http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return adaptive.Overloaded
	case statusClientClosed:
		return adaptive.Abandoned
	}
	return adaptive.Answered
}

// handOff starts the latency at now and wraps w so that the first final
// response header releases the slots.
func (hs *heldSlots) handOff(w http.ResponseWriter) http.ResponseWriter {
	hs.start = time.Now()
	return &slotWriter{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w}, slots: hs}
}

// cancelOuterSlots gives back, without a sample, the slots of every
// rate_limit handler further up the route that w writes through (their
// slotWriters, found by unwrapping w): this handler answers the request
// itself (a rejection, a shed, failure_mode closed), which says nothing
// of the upstream, as a rejection by a zone of their own handler does
// not. A wrapper that cannot be unwrapped hides the ones above it.
func cancelOuterSlots(w http.ResponseWriter) {
	for {
		if sw, ok := w.(*slotWriter); ok {
			sw.slots.cancel()
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}

// slotWriter releases a request's slots at its first non-1xx response
// header (101, an upgrade, included): bodies and streams after it are not
// limited.
type slotWriter struct {
	*caddyhttp.ResponseWriterWrapper
	slots *heldSlots
}

func (w *slotWriter) WriteHeader(status int) {
	if status >= 200 || status == http.StatusSwitchingProtocols {
		w.slots.release(outcomeOfStatus(status))
	}
	w.ResponseWriterWrapper.WriteHeader(status)
}

func (w *slotWriter) Write(b []byte) (int, error) {
	w.slots.release(adaptive.Answered)
	return w.ResponseWriterWrapper.Write(b)
}

func (w *slotWriter) Flush() {
	w.slots.release(adaptive.Answered)
	_ = http.NewResponseController(w.ResponseWriterWrapper.ResponseWriter).Flush()
}
