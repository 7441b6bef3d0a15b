package sluice

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

func init() {
	caddy.RegisterModule(AdminAPI{})
}

// adminTimeout bounds one admin request's store call.
const adminTimeout = 2 * time.Second

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
	// Server and Functions say, on Redis, which server answers (e.g.
	// "valkey 8.1.1") and whether decisions run as a Function (else
	// EVALSHA); absent while Redis has not answered yet.
	Server    string `json:"server,omitempty"`
	Functions *bool  `json:"functions,omitempty"`
	// Period and TimeZone are a period zone's (Window is then the current
	// period's length).
	Period   string `json:"period,omitempty"`
	TimeZone string `json:"time_zone,omitempty"`
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
	regs := zonesInForce()
	infos := make([]zoneInfo, 0, len(regs))
	for _, r := range regs {
		l := r.zone.limit
		info := zoneInfo{Name: r.zone.name, Algorithm: string(l.Algorithm), Events: l.Events, Window: l.Window.Seconds(),
			Burst: l.Capacity(), Backend: r.stores.kind(), Healthy: r.stores.healthy()}
		r.zone.describePeriod(&info)
		if r.stores.server != nil {
			ctx, cancel := context.WithTimeout(context.Background(), adminDescribeTimeout)
			if d, err := r.stores.server.describe(ctx); err == nil {
				info.Server, info.Functions = d.Server, &d.Functions
			}
			cancel()
		}
		infos = append(infos, info)
	}
	return infos
}

func (r *registration) peek(ctx context.Context, key string) (keyState, error) {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	ds, err := r.stores.inspector().Peek(ctx, []algorithms.Request{{Key: r.zone.storeKey(key), Limit: r.zone.limitNow(), Cost: 1}})
	if err != nil {
		return keyState{}, err
	}
	state := keyState{Zone: r.zone.name, Limit: r.zone.limit.Capacity(), Remaining: max(0, ds[0].Remaining),
		ResetSeconds: ceilSeconds(ds[0].ResetAfter)}
	if r.zone.settle.lease {
		inUse := r.zone.limit.Events - ds[0].Remaining
		state.InUse = &inUse
	}
	return state, nil
}

// reset starts key over in the store and in the local fallback of
// failure_mode local, so that neither remembers it.
func (r *registration) reset(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	storeKey := r.zone.storeKey(key)
	if r.stores.local != nil {
		r.stores.local.reset(storeKey)
	}
	return r.stores.inspector().Reset(ctx, storeKey)
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
