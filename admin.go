package sluice

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

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
//	DELETE /rate_limit/zones/<zone>/keys/<key>  start the key over and lift its ban on every instance (its override stays)
//	PUT    /rate_limit/zones/<zone>/keys/<key>/limit  set the key's own limit (zones with overrides)
//	DELETE /rate_limit/zones/<zone>/keys/<key>/limit  clear it: the zone's limit applies again
//	GET    /rate_limit/zones/<zone>/top?n=10   the keys denied most in the last 5 minutes
//	GET    /rate_limit/zones/<zone>/overrides?n=100&after=<next>  the overrides in force, a page at a time
//
// <key> is the expanded key (e.g. a client IP, or an API key), one path
// segment, percent-escaped. PUT …/limit takes {"events":n[,"burst":n]
// [,"expires_in":"24h"]}: events and burst from 1 to 10^9 (burst only on
// token_bucket), expires_in a Caddy duration up to 366 days (default:
// until cleared); an answer carries the header adminMarkHeader.
// An override is configuration, not state: DELETE of the key starts its
// count over and keeps its override; only DELETE …/limit clears it.
//
// Each change made (a key reset, its ban lifted, an override set or
// cleared) is logged at info, as an audit line: the zone, the key's hash
// (as top shows keys), the key itself only where the zone's handler has
// log_key, and the change.
type AdminAPI struct {
	logger *zap.Logger
}

// Provision takes the logger of the audit lines.
func (a *AdminAPI) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	return nil
}

// log is the logger of the audit lines: Provision's, or Caddy's named as
// this module.
func (a AdminAPI) log() *zap.Logger {
	if a.logger != nil {
		return a.logger
	}
	return caddy.Log().Named("admin.api.rate_limit")
}

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

func (a AdminAPI) serve(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set(adminMarkHeader, adminMarkValue) // errors too: Caddy writes them on w
	path := strings.TrimPrefix(r.URL.EscapedPath(), "/rate_limit/")
	if path == "zones" || path == "zones/" {
		if r.Method != http.MethodGet {
			return apiError(http.StatusMethodNotAllowed, "method not allowed")
		}
		return writeJSON(w, listZones())
	}
	parts := strings.Split(path, "/")
	if len(parts) == 3 && parts[0] == "zones" && parts[2] == "top" {
		return serveTop(w, r, parts[1])
	}
	if len(parts) == 3 && parts[0] == "zones" && parts[2] == "overrides" {
		return serveOverrides(w, r, parts[1])
	}
	limitPath := len(parts) == 5 && parts[4] == "limit"
	if (len(parts) != 4 && !limitPath) || parts[0] != "zones" || parts[2] != "keys" {
		return apiError(http.StatusNotFound, "not found: want /rate_limit/zones, /rate_limit/zones/<zone>/keys/<key>, …/keys/<key>/limit, …/<zone>/top or …/<zone>/overrides")
	}
	name, err1 := url.PathUnescape(parts[1])
	key, err2 := url.PathUnescape(parts[3])
	if err1 != nil || err2 != nil {
		return apiError(http.StatusBadRequest, "bad percent-escape in path")
	}
	zone, err := lookupStoreZone(name)
	if err != nil {
		return err
	}
	if limitPath {
		return zone.serveLimit(w, r, key, a.log())
	}
	switch r.Method {
	case http.MethodGet:
		state, err := zone.peek(r.Context(), key)
		if err != nil {
			return apiError(http.StatusBadGateway, err.Error())
		}
		return writeJSON(w, state)
	case http.MethodDelete:
		return zone.serveReset(w, r, key, a.log())
	}
	return apiError(http.StatusMethodNotAllowed, "method not allowed")
}

// serveTop serves GET /rate_limit/zones/<zone>/top?n=10 (n from 1 to 100).
func serveTop(w http.ResponseWriter, r *http.Request, escapedZone string) error {
	if r.Method != http.MethodGet {
		return apiError(http.StatusMethodNotAllowed, "method not allowed: GET")
	}
	name, err := url.PathUnescape(escapedZone)
	if err != nil {
		return apiError(http.StatusBadRequest, "bad percent-escape in path")
	}
	n := defaultTopN
	if s := r.URL.Query().Get("n"); s != "" {
		if n, err = strconv.Atoi(s); err != nil || n < 1 || n > maxTopN {
			return apiError(http.StatusBadRequest, fmt.Sprintf("n: want a whole number from 1 to %d, got %q", maxTopN, s))
		}
	}
	zone, err := lookupStoreZone(name)
	if err != nil {
		return err
	}
	counted, err := zone.top(r.Context(), n)
	if err != nil {
		return apiError(http.StatusBadGateway, err.Error())
	}
	out := make([]topKey, len(counted))
	for i, c := range counted {
		out[i] = topKey{Key: c.Key, Denied: c.Count}
	}
	return writeJSON(w, out)
}

// Overrides listing: n from 1 to maxOverridesN, default defaultOverridesN.
const (
	defaultOverridesN = 100
	maxOverridesN     = 1000
)

// serveOverrides serves GET /rate_limit/zones/<zone>/overrides?n=100
// &after=<next>: a page of the zone's overrides in force, by key hash
// (overrideList); a zone without overrides is 409, naming the option, as
// PUT …/limit.
func serveOverrides(w http.ResponseWriter, r *http.Request, escapedZone string) error {
	if r.Method != http.MethodGet {
		return apiError(http.StatusMethodNotAllowed, "method not allowed: GET")
	}
	name, err := url.PathUnescape(escapedZone)
	if err != nil {
		return apiError(http.StatusBadRequest, "bad percent-escape in path")
	}
	q := r.URL.Query()
	n := defaultOverridesN
	if s := q.Get("n"); s != "" {
		if n, err = strconv.Atoi(s); err != nil || n < 1 || n > maxOverridesN {
			return apiError(http.StatusBadRequest, fmt.Sprintf("n: want a whole number from 1 to %d, got %q", maxOverridesN, s))
		}
	}
	// a hash's + reads as a space in a query not escaped: a hash has no space
	after := strings.ReplaceAll(q.Get("after"), " ", "+")
	if after != "" && !isKeyHash(after) {
		return apiError(http.StatusBadRequest, fmt.Sprintf("after: want the next of a previous page (a key hash), got %q", after))
	}
	zone, err := lookupStoreZone(name)
	if err != nil {
		return err
	}
	if !zone.zone.Overrides {
		return apiError(http.StatusConflict, fmt.Sprintf("zone %s has no overrides: add the zone option `overrides` (JSON \"overrides\": true) to set and list keys' limits", name))
	}
	list, err := zone.overrides(r.Context(), after, n)
	if err != nil {
		return apiError(http.StatusBadGateway, err.Error())
	}
	return writeJSON(w, list)
}

// isKeyHash reports whether s has the form of a key's hash (keyHash).
func isKeyHash(s string) bool {
	if len(s) != hashTagLen {
		return false
	}
	_, err := base64.RawStdEncoding.DecodeString(s)
	return err == nil
}

// overrides is a page of r's zone's overrides in force (overrideList):
// after the hash after, at most n.
func (r *registration) overrides(ctx context.Context, after string, n int) (overrideList, error) {
	if r.stores.lister == nil {
		return overrideList{}, fmt.Errorf("the %s store of zone %s cannot list overrides", r.stores.kind, r.zone.name)
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	listed, next, err := r.stores.lister.ListOverrides(ctx, r.zone.keyPrefix, after, n)
	if err != nil {
		return overrideList{}, err
	}
	burst := r.zone.limit.Algorithm.Features().Burst
	out := overrideList{Zone: r.zone.name, Overrides: make([]overrideEntry, len(listed)), Next: next}
	for i, o := range listed {
		e := overrideEntry{KeyHash: o.Hash, Events: int64(o.Override.Events)}
		if burst {
			e.Burst = int64(o.Override.Burst)
		}
		if r.logKey {
			e.Key = o.Key
		}
		if o.ExpiresIn > 0 {
			s := ceilSeconds(o.ExpiresIn)
			e.ExpiresInSeconds = &s
		}
		out.Overrides[i] = e
	}
	return out, nil
}

// lookupStoreZone is the registration in force of a zone whose keys a
// store counts: unknown is 404, an adaptive zone 409 (its limit is this
// instance's, in process: it has no keys, top offenders or overrides).
func lookupStoreZone(name string) (*registration, error) {
	zone, ok := lookupZone(name)
	if !ok {
		return nil, apiError(http.StatusNotFound, fmt.Sprintf("unknown zone %q", name))
	}
	if zone.zone.isAdaptive() {
		return nil, apiError(http.StatusConflict, fmt.Sprintf("zone %s is adaptive: its limit is each instance's, in process, with no keys in a store; GET /rate_limit/zones shows its limit, in flight and baseline", name))
	}
	return zone, nil
}

// adaptiveInfo is an adaptive zone's entry of the zones listing.
func (z *Zone) adaptiveInfo() zoneInfo {
	info := zoneInfo{Name: z.name, Algorithm: algorithmAdaptive, Events: z.MaxEvents, Burst: z.MaxEvents, Backend: adaptiveBackend, Healthy: true}
	st, _ := z.shed.set.states(time.Now())
	info.Adaptive = &adaptiveInfo{Limit: st.Limit, InFlight: st.InFlight, BaselineSeconds: st.Baseline.Seconds()}
	return info
}

func listZones() []zoneInfo {
	regs := zonesInForce()
	infos := make([]zoneInfo, 0, len(regs))
	for _, r := range regs {
		if r.zone.isAdaptive() {
			infos = append(infos, r.zone.adaptiveInfo())
			continue
		}
		l := r.zone.limit
		info := zoneInfo{Name: r.zone.name, Algorithm: string(l.Algorithm), Events: l.Events, Window: l.Window.Seconds(),
			Burst: l.Capacity(), Backend: r.stores.kind, Healthy: r.stores.healthy()}
		r.zone.describePeriod(&info)
		info.Overrides = r.zone.Overrides
		info.Ban = time.Duration(r.zone.Ban).Seconds()
		info.QuotaLease = r.zone.quotaLease.Seconds()
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

// fullAfterBan is when banned req's key has its full quota back, in
// seconds: its ban's end (banned seconds) or, when later, its state's own
// reset, read without the ban (a banned key's answer is the ban's).
func (r *registration) fullAfterBan(ctx context.Context, req algorithms.Request, banned int64) (int64, error) {
	req.BanSeconds = 0
	ds, err := r.stores.store.Peek(ctx, []algorithms.Request{req})
	if err != nil {
		return 0, err
	}
	return max(banned, ceilSeconds(ds[0].ResetAfter)), nil
}

func (r *registration) peek(ctx context.Context, key string) (keyState, error) {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	limit := r.zone.limitNow()
	req := algorithms.Request{Key: r.zone.storeKey(key), Limit: limit, Cost: 1, Overrides: r.zone.Overrides, BanSeconds: r.zone.banSeconds(r.dryRun),
		Quota: algorithms.QuotaAsk{For: r.zone.quotaLease}} // a leasing zone's look reads its units out
	ds, err := r.stores.store.Peek(ctx, []algorithms.Request{req})
	if err != nil {
		return keyState{}, err
	}
	limit = ds[0].Override.Apply(limit) // the limit in force
	state := keyState{Zone: r.zone.name, Limit: limit.Capacity(), Remaining: max(0, ds[0].Remaining),
		ResetSeconds: ceilSeconds(ds[0].ResetAfter), Override: ds[0].Override.Set(), Leased: ds[0].Quota.Out}
	if req.Bans() {
		banned := int64(0)
		if ds[0].Banned {
			banned = ceilSeconds(ds[0].RetryAfter)
			state.ResetSeconds, err = r.fullAfterBan(ctx, req, banned)
			if err != nil {
				return keyState{}, err
			}
		}
		state.BannedSeconds = &banned
	}
	if r.zone.settle.slot {
		inUse := limit.Events - ds[0].Remaining
		state.InUse = &inUse
	}
	return state, nil
}

// serveLimit serves PUT and DELETE …/keys/<key>/limit: a key's override;
// a change made is logged on log.
func (r *registration) serveLimit(w http.ResponseWriter, req *http.Request, key string, log *zap.Logger) error {
	if req.Method != http.MethodPut && req.Method != http.MethodDelete {
		return apiError(http.StatusMethodNotAllowed, "method not allowed: PUT or DELETE")
	}
	if !r.zone.Overrides {
		return apiError(http.StatusConflict, fmt.Sprintf("zone %s has no overrides: add the zone option `overrides` (JSON \"overrides\": true) to set a key's limit", r.zone.name))
	}
	ov := r.stores.store
	ctx, cancel := context.WithTimeout(req.Context(), adminTimeout)
	defer cancel()
	storeKey := r.zone.storeKey(key)
	if r.logKey { // kept beside the override, for the listing to show
		ctx = algorithms.WithOverrideKey(ctx, key)
	}
	if req.Method == http.MethodDelete {
		return r.answerChange(w, log, key, "override cleared", ov.ClearOverride(ctx, storeKey))
	}
	o, ttl, err := r.zone.parseOverride(req)
	if err != nil {
		return apiError(http.StatusBadRequest, err.Error())
	}
	fields := []zap.Field{zap.Int64("events", int64(o.Events))}
	if o.Burst > 0 {
		fields = append(fields, zap.Int64("burst", int64(o.Burst)))
	}
	if ttl > 0 {
		fields = append(fields, zap.Float64("expires_in", ttl.Seconds()))
	}
	return r.answerChange(w, log, key, "override set", ov.SetOverride(ctx, storeKey, o, ttl), fields...)
}

// answerChange answers a change of a key (a reset, an override set or
// cleared) that the store made with err: 204 when it was made and every
// instance told (they drop their cached denials and quota leases of the
// key); 200 with a warning (resetAnswer), logged too, when it was made
// but the other instances could not be told; 502 when it was not made.
// A change made is logged on log (audit), with fields.
func (r *registration) answerChange(w http.ResponseWriter, log *zap.Logger, key, what string, err error, fields ...zap.Field) error {
	var unannounced *algorithms.UnannouncedError
	switch {
	case errors.As(err, &unannounced):
		r.audit(log, key, what, append(fields, zap.Bool("announced", false))...)
		log.Warn("key "+what+", but not announced to the other instances",
			zap.String("zone", r.zone.name), zap.Error(unannounced))
		return writeJSON(w, resetAnswer{Reset: true, Warning: unannounced.Error()})
	case err != nil:
		return apiError(http.StatusBadGateway, err.Error())
	}
	r.audit(log, key, what, fields...)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// audit logs, at info, that key of r's zone was changed through the admin
// API (what: "reset", "override set", "override cleared"), with fields:
// the key's hash, as the zone's top offenders and the RateLimit header's
// pk show it, and the key itself only where the zone's handler has
// log_key (keys may be secrets).
func (r *registration) audit(log *zap.Logger, key, what string, fields ...zap.Field) {
	all := append([]zap.Field{zap.String("zone", r.zone.name), zap.String("key_hash", keyHash(r.zone.storeKey(key))),
		zap.String("change", what)}, fields...)
	if r.logKey {
		all = append(all, zap.String("key", key))
	}
	log.Info("rate limit key changed through the admin API", all...)
}

// maxOverrideBody bounds PUT …/limit's body.
const maxOverrideBody = 4096

// maxOverrideExpiry is the longest expires_in, as the longest ban: Redis
// keeps an override's end in µs and its key's expiry in ms, which a
// longer one could overflow (the key gone at once).
const maxOverrideExpiry = algorithms.MaxBan

// parseOverride reads and checks PUT …/limit's body for z.
func (z *Zone) parseOverride(req *http.Request) (algorithms.Override, time.Duration, error) {
	dec := json.NewDecoder(http.MaxBytesReader(nil, req.Body, maxOverrideBody))
	dec.DisallowUnknownFields()
	var body overrideBody
	err := dec.Decode(&body)
	if err == nil && dec.Decode(new(json.RawMessage)) != io.EOF {
		err = errors.New("data after the JSON object")
	}
	if err != nil {
		return algorithms.Override{}, 0, fmt.Errorf(`body: want {"events":n[,"burst":n][,"expires_in":"24h"]}: %v`, err)
	}
	if body.Events == nil {
		return algorithms.Override{}, 0, fmt.Errorf(`body: "events" is required`)
	}
	o, err := algorithms.NewOverride(*body.Events, body.Burst)
	if err != nil {
		return algorithms.Override{}, 0, err
	}
	if err := o.Validate(z.limit); err != nil {
		return algorithms.Override{}, 0, err
	}
	var ttl time.Duration
	if body.ExpiresIn != "" {
		d, err := caddy.ParseDuration(body.ExpiresIn)
		if err != nil || d <= 0 || d > maxOverrideExpiry {
			return algorithms.Override{}, 0, fmt.Errorf("expires_in %q: want a positive duration up to 366d, such as 24h or 7d", body.ExpiresIn)
		}
		ttl = d
	}
	return o, ttl, nil
}

// serveReset serves DELETE …/keys/<key>: 204 when the key was reset and
// every instance told; 200 with a warning (resetAnswer), logged too, when
// it was reset but the other instances could not be told; 502 when it
// was not reset. The reset is logged on log; in a zone with ban, with
// whether it lifted a ban (ban_lifted; a look first, which a store that
// fails leaves out).
func (r *registration) serveReset(w http.ResponseWriter, req *http.Request, key string, log *zap.Logger) error {
	var fields []zap.Field
	if r.zone.Ban > 0 {
		if state, err := r.peek(req.Context(), key); err == nil && state.BannedSeconds != nil {
			fields = append(fields, zap.Bool("ban_lifted", *state.BannedSeconds > 0))
		}
	}
	return r.answerChange(w, log, key, "reset", r.reset(req.Context(), key), fields...)
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
	return r.stores.store.Reset(ctx, storeKey)
}

func writeJSON(w http.ResponseWriter, v any) error {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // read by operators and scripts, never embedded in HTML
	return enc.Encode(v)
}

func apiError(status int, msg string) error {
	return caddy.APIError{HTTPStatus: status, Message: msg}
}

// Interface guards
var (
	_ caddy.AdminRouter = (*AdminAPI)(nil)
	_ caddy.Provisioner = (*AdminAPI)(nil)
)

// top returns the n keys r's zone denied most in the last 5 minutes, by
// the denials each surely had (algorithms.Guaranteed): in memory from its
// window; on a store that shares top offenders (algorithms.TopSharer:
// Redis) the sum of every instance's flushes (each a guaranteed count) and
// this instance's denials not flushed yet.
func (r *registration) top(ctx context.Context, n int) ([]algorithms.Counted, error) {
	t := topFor(r.zone.name)
	now := time.Now()
	if r.stores.top == nil {
		return algorithms.Guaranteed(n, t.window.TopAt(now, 0)), nil
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	flushed, err := r.stores.top.ReadTop(ctx, r.zone.storePrefix(), r.zone.name, now)
	if err != nil {
		return nil, err
	}
	return algorithms.Guaranteed(n, algorithms.MergeCounted(0, flushed, t.pending.Top(0))), nil
}
