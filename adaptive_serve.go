package sluice

import (
	"net/http"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sluicehq/caddy-sluice/adaptive"
	"github.com/sluicehq/caddy-sluice/algorithms"
)

// shedProblemType is the problem type of a shed request: not
// quota-exceeded, since the client used no quota: the upstream is busy.
const shedProblemType = "https://github.com/sluicehq/caddy-sluice/blob/main/docs/load-shedding.md#overloaded"

// takeSlots takes the request's slot in each adaptive zone that matches
// it, before any other zone decides, waiting for one (max_delay) best
// class first. When a zone sheds it, or its client leaves while it
// waits, the slots taken are given back and answered is true, with
// what ServeHTTP returns.
func (h *Handler) takeSlots(w http.ResponseWriter, r *http.Request, hs *heldSlots) (answered bool, err error) {
	templates := h.templates(r, r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer))
	var own *http.Request
	for _, z := range h.shedZones {
		matched, err := z.matches(r, templates, &own)
		if err != nil {
			hs.cancel()
			return true, caddyhttp.Error(http.StatusInternalServerError, err)
		}
		if !matched {
			continue
		}
		key := z.expand(templates)
		now := time.Now()
		l := z.shed.set.limiter(key, now)
		class := z.classes.of(templates)
		if h.DryRun || z.DryRun {
			s, fits := l.ForceAt(now, class)
			outcome := map[bool]string{true: shedAdmitted, false: shedDryRun}[fits]
			hs.list = append(hs.list, heldSlot{z: z, l: l, slot: s, outcome: outcome})
			h.countShed(z, class, outcome)
			continue
		}
		s, ok := l.AcquireAt(now, class)
		outcome := shedAdmitted
		if !ok && z.MaxDelay > 0 {
			var left bool
			s, ok, left = l.Wait(r.Context(), class, time.Duration(z.MaxDelay))
			outcome = shedDelayed
			if left {
				hs.cancel()
				h.countShed(z, class, shedLeft)
				traceShed(r.Context(), z, class, shedLeft, int64(max(0, l.Share(class)-l.StateAt(time.Now()).InFlight)))
				w.WriteHeader(statusClientClosed)
				return true, nil
			}
		}
		if !ok {
			hs.cancel()
			h.countShed(z, class, shedShed)
			return true, h.shed(w, r, z, l, class)
		}
		hs.list = append(hs.list, heldSlot{z: z, l: l, slot: s, outcome: outcome})
		h.countShed(z, class, outcome)
	}
	return false, nil
}

// shed answers a request zone z sheds: the zone's status, Retry-After,
// only this zone's RateLimit member (q its class's share, r what is left
// of it), through handle_errors as any rejection, or with problem_details
// the problem JSON (type overloaded, not quota-exceeded).
func (h *Handler) shed(w http.ResponseWriter, r *http.Request, z *Zone, l *adaptive.Limiter, class int) error {
	share := l.Share(class)
	inFlight := l.StateAt(time.Now()).InFlight
	hdr := w.Header()
	only := shedMember(z, share, max(0, share-inFlight), false)
	traceShed(r.Context(), z, class, shedShed, int64(max(0, share-inFlight)))
	h.headers.writeAll(hdr, &only, h.headers.now(), 1)
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	body := shedProblem(z, share)
	repl.Set(exceededPlaceholder, z.nameValue)
	repl.Set(problemPlaceholder, body)
	if h.events.ShouldEmit(exceededEvent) {
		h.events.Emit(h.ctx, exceededEvent, map[string]any{"zone": z.name, "retry_after": 1.0, "shed": true})
	}
	if !h.ProblemDetails || (hasErrorRoutes(r) && !inErrorRoutes(r)) {
		return h.answerRejection(w, r, rejectionError(z.Status, z.exceeded))
	}
	hdr.Set(headerContentType, problemContentType)
	hdr.Set(headerNoSniff, "nosniff")
	hdr.Set(headerContentLength, strconv.Itoa(len(body)))
	w.WriteHeader(z.Status)
	_, _ = w.Write([]byte(body))
	return nil
}

// shedProblem is the problem JSON of a request zone z shed.
func shedProblem(z *Zone, share int) string {
	return `{"type":"` + shedProblemType + `","title":"Overloaded","status":` + strconv.Itoa(z.Status) +
		`,"detail":"the upstream is at its limit of requests in flight: try again later","zone":` + z.quoted +
		`,"limit":` + strconv.Itoa(share) + `,"retry_after":1}`
}

// shedMember is a verdict of adaptive zone z alone, for its headers, as
// a concurrency zone's: q its class's share, r what is left of it, t 1 s
// when nothing is (a slot comes back whenever a response ends); admitted
// or shed (Retry-After 1 s).
func shedMember(z *Zone, share, remaining int, admitted bool) verdict {
	d := algorithms.Decision{Remaining: int64(remaining), Allowed: admitted}
	if remaining == 0 || !admitted {
		d.MoreAfter = time.Second
	}
	if !admitted {
		d.RetryAfter = time.Second
	}
	return verdict{
		zones: []*Zone{z},
		reqs:  []algorithms.Request{{Limit: algorithms.Limit{Algorithm: algorithms.Concurrency, Events: int64(share)}, DryRun: z.DryRun}},
		ds:    []algorithms.Decision{d},
	}
}
