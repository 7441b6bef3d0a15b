package sluice

import (
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// ServeHTTP decides the request over every zone that matches it: the
// adaptive zones' slots first (a shed request never reaches the store),
// then the store's zones. It has the decision observed (observe.go:
// metrics, trace, logs, top offenders), writes the headers of its
// decisions and of the adaptive zones' slots (none of a store zone when
// failure_mode passed or refused it undecided), then sheds, refuses or
// rejects it, or passes it on after its wait (max_delay). When a zone
// settles after the response, the response goes through a recorder of
// its status, and the zones settle once the next handler is done:
// returned, failed, or panicked (http.ErrAbortHandler too), which then
// goes on. The verdict lives on this stack.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) (err error) {
	var slots *heldSlots    // the adaptive zones' slots
	if h.shedZones != nil { // (a pointer: a handler without adaptive zones allocates none)
		slots = newHeldSlots()
	}
	v, err := h.match(r, slots)
	if err != nil {
		return caddyhttp.Error(http.StatusInternalServerError, err)
	}
	ctx := r.Context()
	if slots != nil {
		slots.acquire(ctx, h.DryRun)
		defer slots.cancel() // given back unsampled unless released after the hand-off
	}
	if !slots.wasShed() {
		v, err = h.backend.decide(ctx, v)
	}
	o := h.observe(ctx, &v, slots, err)
	slots.writeHeaders(h.headers, w.Header(), &v, o.retrySeconds(), err)
	switch {
	case slots.wasShed():
		return h.shed(w, r, slots.shed)
	case err != nil:
		return h.refuse(w, r, err)
	case o.rejected:
		return h.reject(w, r, &v, o)
	}
	if v.settles {
		wd := h.watch(w, &v)
		w, err = &wd.rec, errPanicked // until next returns
		defer func() { h.settleAfter(ctx, &v, wd, err) }()
	}
	defer v.place.release() // held only by a request that waits: its wait gives it back, this on a panic
	if !wait(ctx, &v, o.wait) {
		h.observeAbandoned(&v, o.wait)
		w.WriteHeader(statusClientClosed)
		return nil
	}
	if slots.held() {
		w, err = slots.handOff(w), errPanicked // until next returns
		defer func() { slots.finish(ctx, err) }()
	}
	return next.ServeHTTP(w, r)
}

// match is the verdict of r before any decision: the zones that match it
// and a store request for each, built with its templates (Handler.templates:
// one per request, so a token is verified once); and, in slots, the
// adaptive zones that match it, with their keys. The store keys of
// all zones share one string: one allocation, however many zones; the
// requests another (the store may keep them, in a batch or a deny cache).
// The zones cost none where the handler has a zone set for them.
func (h *Handler) match(r *http.Request, slots *heldSlots) (verdict, error) {
	templates := h.templates(r, r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer))
	var own *http.Request // r with templates, for matchers that name {jwt.*}
	for _, z := range h.shedZones {
		key, matched, err := z.keyOf(r, templates, &own)
		if err != nil {
			return verdict{}, err
		}
		if matched {
			slots.list = append(slots.list, heldSlot{z: z, key: key, class: z.classes.of(templates)})
		}
	}
	var keyBuf [256]byte
	var endBuf [8]int
	keys, ends := keyBuf[:0], endBuf[:0]
	var zones []*Zone   // without zone sets
	var set int         // with them: the bits of the matching zones
	var logged []string // with log_key, the keys
	if h.LogKey {
		logged = make([]string, 0, len(h.zones))
	}
	for i, z := range h.zones {
		key, matched, err := z.keyOf(r, templates, &own)
		if err != nil {
			return verdict{}, err
		}
		if !matched {
			continue
		}
		if h.zoneSets != nil {
			set |= 1 << i
		} else {
			zones = append(zones, z)
		}
		if h.LogKey {
			logged = append(logged, key)
		}
		keys = z.appendStoreKey(keys, key)
		ends = append(ends, len(keys))
	}
	if h.zoneSets != nil {
		zones = h.zoneSets[set]
	}
	reqs := make([]algorithms.Request, len(zones))
	all, start := string(keys), 0
	for i, z := range zones {
		reqs[i] = z.request(templates, all[start:ends[i]], h.DryRun)
		start = ends[i]
	}
	return verdict{zones: zones, reqs: reqs, repl: templates, keys: logged}, nil
}

// keyOf is z's key for r, expanded with templates, when z's matchers
// match r (own as Zone.matches keeps it).
func (z *Zone) keyOf(r *http.Request, templates *caddy.Replacer, own **http.Request) (key string, matched bool, err error) {
	if matched, err = z.matches(r, templates, own); err != nil {
		return "", false, fmt.Errorf("zone %s: matching: %w", z.name, err)
	}
	if !matched {
		return "", false, nil
	}
	return z.expand(templates), true, nil
}
