// Package sluice is a Caddy HTTP handler that limits request rates with one
// global, atomic count in Redis: the `rate_limit` directive, module
// http.handlers.rate_limit.
package sluice

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/jwtclaims"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Provision sets defaults, loads the zones' matchers and connects the store.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.ctx = ctx
	h.errorChains = new(errorChains)
	h.logger = ctx.Logger()
	if h.Status == 0 {
		h.Status = defaultStatus
	}
	if h.FailureMode == "" {
		h.FailureMode = defaultFailureMode
	}
	styles, err := parseHeaderStyles(h.Headers)
	if err != nil {
		return err
	}
	h.headers = styles
	for _, p := range h.unsetEnv() {
		h.logger.Warn("an environment variable the config names is not set: its placeholder expands to \"\"", zap.String("placeholder", p))
	}
	registry := ctx.GetMetricsRegistry()
	if h.DisableMetrics {
		registry = unexposed
	}
	metrics, err := metricsOn(registry)
	if err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	if err := h.provisionZones(ctx, registry, metrics); err != nil {
		return err
	}
	if h.JWT != nil {
		if h.verifier, err = jwtclaims.New(ctx, h.JWT.Expanded()); err != nil {
			return err
		}
	}

	eventsApp, err := ctx.App("events")
	if err != nil {
		return fmt.Errorf("loading events app: %w", err)
	}
	var ok bool
	if h.events, ok = eventsApp.(*caddyevents.App); !ok {
		return fmt.Errorf("events app is %T, want *caddyevents.App", eventsApp)
	}

	if err := h.provisionBackend(metrics); err != nil {
		return err
	}
	for _, w := range h.startWarnings(h.backend.shared().remote) {
		h.logger.Warn(w)
	}
	// last: a Provision that fails registers nothing, so the Cleanup Caddy
	// then calls withdraws nothing of the running config
	// adaptive zones too: the zones listing shows them, and a zone name
	// is one zone's, adaptive or not
	registered := append(h.zones[:len(h.zones):len(h.zones)], h.shedZones...)
	h.registrations, err = registerZones(ctx.GetMetricsRegistry(), registered, h.backend.shared(), h.DryRun, h.LogKey)
	if err == nil && h.shared != nil {
		h.shared.flushesZones(h.zones) // from their first denial, not from the next tick
	}
	return err
}

// provisionZones provisions the zones, in name order (the order of their
// headers), their metrics on registry, and derives what the handler needs
// of them.
func (h *Handler) provisionZones(ctx caddy.Context, registry *prometheus.Registry, metrics *metrics) error {
	for _, name := range slices.Sorted(maps.Keys(h.Zones)) {
		z := h.Zones[name]
		if z.isAdaptive() {
			if err := z.provisionAdaptive(ctx, name); err != nil {
				return fmt.Errorf("zone %s: %w", name, err)
			}
			h.shedZones = append(h.shedZones, z)
			continue
		}
		if err := z.provision(ctx, name, registry); err != nil {
			return fmt.Errorf("zone %s: %w", name, err)
		}
		h.zones = append(h.zones, z)
	}
	if len(h.shedZones) > 0 {
		if err := registerAdaptiveMetrics(registry); err != nil {
			return fmt.Errorf("registering metrics: %w", err)
		}
	}
	h.zoneSets = zoneSets(h.zones)
	h.ownClaims = usesOwnClaims(h.zones)
	h.waiting = newWaiting(h.zones, h.DryRun, h.logger)
	return nil
}

// provisionBackend connects the stores, builds the backend, and gives each
// zone what depends on its store: its key prefix (the Redis key_prefix,
// none in memory, the zone name and ":"), its quota lease (none on a
// store without leases) and its observer. Its switch is the one place a
// store is chosen.
func (h *Handler) provisionBackend(metrics *metrics) error {
	d := deciding{waiting: h.waiting, metrics: metrics, logger: h.logger}
	prefix := ""
	switch {
	case h.Redis == nil:
		d.stores = memoryStores()
		h.backend = &memoryBackend{d}
	default:
		h.Redis.setDefaults()
		shared, key, err := h.Redis.connect(h.logger)
		if err != nil {
			return err
		}
		d.stores, h.client, h.shared, d.timeout = &shared.stores, key, shared, time.Duration(h.Redis.Timeout)
		duration := metrics.forRedis(d.label)
		prefix = h.Redis.KeyPrefix
		failure := failurePolicy{mode: h.FailureMode, local: d.local, log: newFailureLog(h.logger, h.FailureMode, shared.stores.outage)}
		h.backend = &redisBackend{deciding: d, failure: failure, duration: duration}
	}
	for _, z := range h.zones {
		z.keyPrefix = prefix + z.name + ":"
		z.resolveQuotaLease(h.QuotaLease, h.DryRun, d.stores.leases == nil)
		z.zoneObserver = newZoneObserver(metrics, z.name, z.quotaLease > 0, d.stores.top != nil)
		if z.metrics.quotaLeases != nil && !h.DisableMetrics { // the zone's, not this handler's
			trackLeaseCounters(z.keyPrefix, z.metrics.quotaLeases)
		}
	}
	return nil
}

// noRedisWarning says where counts live without a redis block.
const noRedisWarning = "no redis block: counters live in this instance's memory, so limits are per instance"

// startWarnings are what Provision warns about where the counts live: in
// memory without a shared store (a redis block), and mholt/caddy-ratelimit's
// options that Sluice ignores. A caddy-ratelimit Caddyfile that asks for
// distributed and has no redis block gets one warning naming the missing
// block, since its instances no longer share a limit.
func (h *Handler) startWarnings(shared bool) []string {
	ignored := len(h.Distributed) > 0 || len(h.Storage) > 0 || h.SweepInterval != 0
	switch {
	case !shared && len(h.Distributed) > 0:
		return []string{"distributed asks for one limit shared by every instance, but this rate_limit has no redis block: " +
			"counters live in this instance's memory, so limits are per instance; add a redis block to share them"}
	case !shared && ignored:
		return []string{"storage and sweep_interval are mholt/caddy-ratelimit options; they are ignored", noRedisWarning}
	case !shared:
		return []string{noRedisWarning}
	case ignored:
		return []string{"distributed, storage and sweep_interval are mholt/caddy-ratelimit options; they are ignored: Redis keeps one global count"}
	}
	return nil
}

// UnmarshalJSON decodes a handler strictly, as Caddy decodes a module (an
// unknown field is an error), reading quota_lease itself, as zones do
// (quotaLeaseJSON), and naming the zone of an error in a zone.
func (h *Handler) UnmarshalJSON(b []byte) error {
	type plain Handler // Handler's fields, without this method
	aux := struct {
		*plain
		Zones      map[string]json.RawMessage `json:"rate_limits,omitempty"` // these two shadow plain's
		QuotaLease json.RawMessage            `json:"quota_lease,omitempty"`
	}{plain: (*plain)(h)}
	if err := caddy.StrictUnmarshalJSON(b, &aux); err != nil {
		return err
	}
	if err := quotaLeaseJSON(aux.QuotaLease, &h.QuotaLease, ""); err != nil {
		return err
	}
	if aux.Zones != nil {
		h.Zones = make(map[string]*Zone, len(aux.Zones))
	}
	for _, name := range slices.Sorted(maps.Keys(aux.Zones)) {
		if string(aux.Zones[name]) == "null" {
			h.Zones[name] = nil
			continue
		}
		z := new(Zone)
		if err := z.UnmarshalJSON(aux.Zones[name]); err != nil {
			return fmt.Errorf("zone %s: %w", name, err)
		}
		h.Zones[name] = z
	}
	return nil
}

// envPlaceholder is a runtime {env.NAME} placeholder in a config.
var envPlaceholder = regexp.MustCompile(`\{env\.([^{}]+)\}`)

// unsetEnv lists the {env.NAME} placeholders of the handler's config
// (keys, Redis and JWT settings, matchers: any string of it) whose
// variable is not set now, at provision: each expands to "", which is
// rarely what was meant (a Redis url, a secret, a key that all requests
// share), so Provision warns; an unset variable is no error, as in Caddy.
func (h *Handler) unsetEnv() []string {
	config, err := json.Marshal(h)
	if err != nil {
		return nil
	}
	var unset []string
	for _, m := range envPlaceholder.FindAllSubmatch(config, -1) {
		if _, ok := os.LookupEnv(string(m[1])); !ok && !slices.Contains(unset, string(m[0])) {
			unset = append(unset, string(m[0]))
		}
	}
	return unset
}

// Validate checks the configuration.
func (h *Handler) Validate() error {
	if len(h.Zones) == 0 {
		return fmt.Errorf("at least one zone is required")
	}
	switch h.FailureMode {
	case failOpen, failClosed, failLocal:
	default:
		return fmt.Errorf("failure_mode: want open, closed or local, got %q", h.FailureMode)
	}
	if h.Status < 400 || h.Status > 599 {
		return fmt.Errorf("status: want a 4xx or 5xx code, got %d", h.Status)
	}
	if h.Jitter < 0 || h.Jitter > 1 {
		return fmt.Errorf("jitter: want a fraction between 0 and 1, got %v", h.Jitter)
	}
	if err := h.validateQuotaLease(); err != nil {
		return err
	}
	for _, z := range append(h.shedZones[:len(h.shedZones):len(h.shedZones)], h.zones...) {
		if err := z.validate(); err != nil {
			return fmt.Errorf("zone %s: %w", z.name, err)
		}
		if err := z.checkClaims(h.JWT != nil); err != nil {
			return fmt.Errorf("zone %s: %w", z.name, err)
		}
	}
	if h.JWT != nil {
		if err := h.JWT.Validate(); err != nil {
			return err
		}
	}
	if h.Redis != nil {
		return h.Redis.validate()
	}
	return nil
}

// Cleanup withdraws exactly what Provision registered: the zones, from the
// registry and the admin API, the quota leases of its zones, and the
// shared Redis client.
func (h *Handler) Cleanup() error {
	unregisterZones(h.registrations)
	h.registrations = nil
	for _, z := range h.shedZones {
		z.cleanupAdaptive()
	}
	h.giveBackLeases()
	if h.client != "" {
		_, err := clients.Delete(h.client)
		return err
	}
	return nil
}

// giveBackLeases gives back the quota leases this instance holds of h's
// zones' keys, as a reload or a stop unloads them: a config that changed
// a zone's limit or its quota_lease strands no units until the leases'
// end, and one that did not leases again. Zones of one name share their
// keys, so a zone kept by the new config gives its leases back too.
func (h *Handler) giveBackLeases() {
	if h.backend == nil {
		return
	}
	if leases := h.backend.shared().leases; leases != nil {
		for _, z := range h.zones {
			leases.GiveBack(z.keyPrefix + "{")
		}
	}
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
