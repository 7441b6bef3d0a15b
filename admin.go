package sluice

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

func init() {
	caddy.RegisterModule(AdminAPI{})
}

// adminTimeout bounds one admin request's store call.
const adminTimeout = 2 * time.Second

// active holds the zones of the loaded configs by name, with the handler
// that serves each; the latest loaded config wins, so after a reload the
// admin API sees the new zones.
var active = struct {
	sync.Mutex
	zones map[string]*activeZone
}{zones: make(map[string]*activeZone)}

type activeZone struct {
	zone    *Zone
	handler *Handler
	refs    int
}

func activate(h *Handler) {
	active.Lock()
	defer active.Unlock()
	for _, z := range h.zones {
		a, ok := active.zones[z.name]
		if !ok {
			a = new(activeZone)
			active.zones[z.name] = a
		}
		a.zone, a.handler = z, h
		a.refs++
	}
}

func deactivate(h *Handler) {
	active.Lock()
	defer active.Unlock()
	for _, z := range h.zones {
		if a, ok := active.zones[z.name]; ok {
			if a.refs--; a.refs == 0 {
				delete(active.zones, z.name)
			}
		}
	}
}

func lookupZone(name string) (*activeZone, bool) {
	active.Lock()
	defer active.Unlock()
	a, ok := active.zones[name]
	if !ok {
		return nil, false
	}
	copied := *a
	return &copied, true
}

// AdminAPI is the admin endpoint of rate limits, on Caddy's admin listener
// and under its access rules:
//
//	GET    /rate_limit/zones                   the zones in force
//	GET    /rate_limit/zones/<zone>/keys/<key>  a key's state, consuming nothing
//	DELETE /rate_limit/zones/<zone>/keys/<key>  start the key over
//
// <key> is the expanded key (e.g. a client IP, or an API key), one path
// segment, percent-escaped.
type AdminAPI struct{}

// CaddyModule returns the Caddy module information.
func (AdminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.rate_limit",
		New: func() caddy.Module { return new(AdminAPI) },
	}
}

// Routes returns the admin routes.
func (a AdminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: "/rate_limit/", Handler: caddy.AdminHandlerFunc(a.serve)}}
}

type zoneInfo struct {
	Name      string  `json:"name"`
	Algorithm string  `json:"algorithm"`
	Events    int64   `json:"events"`
	Window    float64 `json:"window"`
	Burst     int64   `json:"burst"`
	Backend   string  `json:"backend"`
	Healthy   bool    `json:"healthy"`
}

type keyState struct {
	Zone         string `json:"zone"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetSeconds int64  `json:"reset_seconds"`
	// InUse is, for a concurrency zone, the leases held now (requests in
	// flight across every instance).
	InUse *int64 `json:"in_use,omitempty"`
}

func (a AdminAPI) serve(w http.ResponseWriter, r *http.Request) error {
	path := strings.TrimPrefix(r.URL.EscapedPath(), "/rate_limit/")
	if path == "zones" || path == "zones/" {
		if r.Method != http.MethodGet {
			return apiError(http.StatusMethodNotAllowed, "method not allowed")
		}
		return writeJSON(w, listZones())
	}
	parts := strings.Split(path, "/")
	if len(parts) != 4 || parts[0] != "zones" || parts[2] != "keys" {
		return apiError(http.StatusNotFound, "not found: want /rate_limit/zones or /rate_limit/zones/<zone>/keys/<key>")
	}
	name, err1 := url.PathUnescape(parts[1])
	key, err2 := url.PathUnescape(parts[3])
	if err1 != nil || err2 != nil {
		return apiError(http.StatusBadRequest, "bad percent-escape in path")
	}
	zone, ok := lookupZone(name)
	if !ok {
		return apiError(http.StatusNotFound, fmt.Sprintf("unknown zone %q", name))
	}
	switch r.Method {
	case http.MethodGet:
		state, err := zone.peek(r.Context(), key)
		if err != nil {
			return apiError(http.StatusBadGateway, err.Error())
		}
		return writeJSON(w, state)
	case http.MethodDelete:
		if err := zone.reset(r.Context(), key); err != nil {
			return apiError(http.StatusBadGateway, err.Error())
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	return apiError(http.StatusMethodNotAllowed, "method not allowed")
}

func listZones() []zoneInfo {
	active.Lock()
	defer active.Unlock()
	infos := make([]zoneInfo, 0, len(active.zones))
	for _, name := range sortedKeys(active.zones) {
		a := active.zones[name]
		l := a.zone.limit
		info := zoneInfo{Name: name, Algorithm: string(l.Algorithm), Events: l.Events, Window: l.Window.Seconds(),
			Burst: l.Capacity(), Backend: "memory", Healthy: true}
		if a.handler.breaker != nil {
			info.Backend, info.Healthy = "redis", !a.handler.breaker.isOpen()
		}
		infos = append(infos, info)
	}
	return infos
}

func (a *activeZone) inspector() (algorithms.Inspector, error) {
	inspector, ok := a.handler.store.(algorithms.Inspector)
	if !ok {
		return nil, fmt.Errorf("zone %s: its store cannot be inspected", a.zone.name)
	}
	return inspector, nil
}

func (a *activeZone) peek(ctx context.Context, key string) (keyState, error) {
	inspector, err := a.inspector()
	if err != nil {
		return keyState{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	ds, err := inspector.Peek(ctx, []algorithms.Request{{Key: a.zone.storeKey(key), Limit: a.zone.limit, Cost: 1}})
	if err != nil {
		return keyState{}, err
	}
	state := keyState{Zone: a.zone.name, Limit: a.zone.limit.Capacity(), Remaining: max(0, ds[0].Remaining),
		ResetSeconds: ceilSeconds(ds[0].ResetAfter)}
	if a.zone.settle.lease {
		inUse := a.zone.limit.Events - ds[0].Remaining
		state.InUse = &inUse
	}
	return state, nil
}

func (a *activeZone) reset(ctx context.Context, key string) error {
	inspector, err := a.inspector()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	return inspector.Reset(ctx, a.zone.storeKey(key))
}

func writeJSON(w http.ResponseWriter, v any) error {
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(v)
}

func apiError(status int, msg string) error {
	return caddy.APIError{HTTPStatus: status, Message: msg}
}

// Interface guards
var _ caddy.AdminRouter = (*AdminAPI)(nil)
