package sluice

import (
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// takeSlots takes the request's slot in each adaptive zone that matches
// it, before any other zone decides, waiting for one (max_delay) best
// class first. When a zone sheds it, or its client leaves while it
// waits, the slots taken are given back and answered is true, with
// what ServeHTTP returns.
func (h *Handler) takeSlots(w http.ResponseWriter, r *http.Request, templates *caddy.Replacer, hs *heldSlots) (answered bool, err error) {
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
		outcome, left := shedAdmitted, false
		if !ok && z.MaxDelay > 0 {
			s, ok, left = l.Wait(r.Context(), class, time.Duration(z.MaxDelay))
			outcome = shedDelayed
		}
		if !ok {
			hs.cancel()
			share := l.Share(class)
			remaining := max(0, share-l.StateAt(time.Now()).InFlight)
			h.observeShed(r.Context(), z, class, left, remaining)
			return true, h.shed(w, r, z, share, remaining, left)
		}
		hs.list = append(hs.list, heldSlot{z: z, l: l, slot: s, outcome: outcome})
		h.countShed(z, class, outcome)
	}
	return false, nil
}
