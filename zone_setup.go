package sluice

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// provision sets the zone up, its metrics on registry (unexposed with
// the handler's disable_metrics), and loads its matchers.
func (z *Zone) provision(ctx caddy.Context, name string, registry *prometheus.Registry) error {
	if err := z.setup(name); err != nil {
		return err
	}
	z.provisionSettle(registry)
	if z.MaxDelay > 0 {
		z.delay = delayMetricsFor(registry, name)
	}
	return z.loadMatchers(ctx)
}

// loadMatchers loads the zone's matchers, if it has any.
func (z *Zone) loadMatchers(ctx caddy.Context) error {
	if len(z.MatcherSetsRaw) == 0 {
		return nil
	}
	z.matchClaims = matchersNameClaims(z.MatcherSetsRaw)
	mods, err := ctx.LoadModule(z, "MatcherSetsRaw")
	if err != nil {
		return fmt.Errorf("loading matchers: %w", err)
	}
	if err := z.matchers.FromInterface(mods); err != nil {
		return fmt.Errorf("loading matchers: %w", err)
	}
	return nil
}

// setup sets defaults, derives the configuration the zone serves with
// and starts its runtime (zoneRuntime).
func (z *Zone) setup(name string) error {
	z.name = name
	if z.isAdaptive() {
		z.zoneRuntime = newZoneRuntime(name, fmt.Errorf("load shed in zone %s", name))
		return z.setupAdaptive()
	}
	z.classes = z.setupClasses()
	calendar, err := z.calendar()
	if err != nil {
		return err
	}
	if z.Algorithm == "" {
		z.Algorithm = string(defaultAlgorithm)
	}
	if f := algorithms.Algorithm(z.Algorithm).Features(); f.DefaultWindow > 0 && z.Window == 0 {
		z.Window = caddy.Duration(f.DefaultWindow)
	}
	z.limit = algorithms.Limit{
		Algorithm: algorithms.Algorithm(z.Algorithm),
		Events:    z.MaxEvents,
		Window:    time.Duration(z.Window),
		Burst:     z.Burst,
		MaxDelay:  time.Duration(z.MaxDelay),
		Calendar:  calendar,
	}
	z.zoneRuntime = newZoneRuntime(name, errors.New("rate limit exceeded in zone "+name))
	z.setupPeriods()
	z.policy = policyMember(name, z.limit)
	z.dynamic = z.EventsPlaceholder != "" || z.BurstPlaceholder != ""
	z.eventsVar, z.burstVar = singlePlaceholder(z.EventsPlaceholder), singlePlaceholder(z.BurstPlaceholder)
	z.keyVar = singlePlaceholder(z.Key)
	if err := z.setupSettle(); err != nil {
		return err
	}
	return z.setupCost()
}

func (z *Zone) setupCost() error {
	if z.Cost == "" {
		z.cost = defaultCost
		return nil
	}
	if strings.Contains(z.Cost, "{") {
		return nil
	}
	cost, ok := parseCost(z.Cost)
	if !ok {
		return fmt.Errorf("cost: want a positive integer or a placeholder, got %q", z.Cost)
	}
	z.cost = cost
	return nil
}

func (z *Zone) validate() error {
	if !zoneName.MatchString(z.name) {
		return fmt.Errorf("name: want 1 to 64 letters, digits, '_', '-' or '.'")
	}
	if z.Key == "" {
		return fmt.Errorf("key is required")
	}
	if z.isAdaptive() {
		return z.validateAdaptive()
	}
	if err := z.validateClasses(); err != nil {
		return err
	}
	if z.limit.MaxDelay > maxMaxDelay {
		return fmt.Errorf("max_delay: want at most %v, got %v", maxMaxDelay, z.limit.MaxDelay)
	}
	if err := z.validateBurst(); err != nil {
		return err
	}
	if err := z.limit.Validate(); err != nil {
		return err
	}
	if err := validateBan(time.Duration(z.Ban)); err != nil {
		return err
	}
	if err := z.validateQuotaLease(); err != nil {
		return err
	}
	if z.Overrides && !z.limit.Algorithm.Features().Overrides {
		return fmt.Errorf("overrides apply only to %s, not %s",
			algorithms.NamesWith(algorithms.Features{Overrides: true}), z.limit.Algorithm)
	}
	if err := z.validateSettle(); err != nil {
		return err
	}
	if err := z.validatePlaceholders(); err != nil {
		return err
	}
	// with a limit per request or an override, a key's own limit may be
	// larger than the fallback, up to MaxEvents
	if capacity := z.limit.Capacity(); z.cost > capacity && (!z.dynamic && !z.Overrides || z.cost > algorithms.MaxEvents) {
		return fmt.Errorf("cost %d exceeds the limit of %d: no request could pass", z.cost, capacity)
	}
	if z.IPv4Prefix < 0 || z.IPv4Prefix > 32 {
		return fmt.Errorf("ipv4_prefix: want 0 to 32 bits, got %d", z.IPv4Prefix)
	}
	if z.IPv6Prefix < 0 || z.IPv6Prefix > 128 {
		return fmt.Errorf("ipv6_prefix: want 0 to 128 bits, got %d", z.IPv6Prefix)
	}
	return nil
}

// validateBurst refuses a burst (static or per request) on an algorithm
// that has none, naming burst, before the limit's own checks do.
func (z *Zone) validateBurst() error {
	a := z.limit.Algorithm
	if z.Burst == 0 && z.BurstPlaceholder == "" || !slices.Contains(algorithms.Names(), string(a)) || a.Features().Burst {
		return nil
	}
	burst := algorithms.NamesWith(algorithms.Features{Burst: true})
	return fmt.Errorf("burst: %s has no burst: only %s has a capacity apart from events; remove burst, or set algorithm %s", a, burst, burst)
}

// templates are the zone's options that Caddy's replacer expands, by
// option name, in the order they are checked.
func (z *Zone) templates() [][2]string {
	return [][2]string{
		{"key", z.Key},
		{"events", z.EventsPlaceholder},
		{"burst", z.BurstPlaceholder},
		{"cost", z.Cost},
		{"cost_from_response", z.CostFromResponse},
	}
}

// checkClaims refuses a {jwt.*} placeholder in a handler without a jwt
// block (hasJWT false): it would always expand to "" (the handler's
// claims are its own, jwt.go), so every request would share one key or
// take the fallback.
func (z *Zone) checkClaims(hasJWT bool) error {
	if hasJWT {
		return nil
	}
	for _, t := range z.templates() {
		i := strings.Index(t[1], "{"+jwtPrefix)
		if i < 0 {
			continue
		}
		placeholder := t[1][i:]
		if end := strings.IndexByte(placeholder, '}'); end >= 0 {
			placeholder = placeholder[:end+1]
		}
		return fmt.Errorf("%s: %s is always empty: this rate_limit has no jwt block, and {jwt.*} comes only from its own "+
			"(add a jwt block, or read another handler's verified claims as {%s<claim>})", t[0], placeholder, jwtExportedPrefix)
	}
	return nil
}

// validatePlaceholders checks the templates' braces, events_placeholder
// and burst_placeholder.
func (z *Zone) validatePlaceholders() error {
	for _, t := range z.templates() {
		if err := checkBraces(t[0], t[1]); err != nil {
			return err
		}
	}
	if z.EventsPlaceholder != "" && !strings.Contains(z.EventsPlaceholder, "{") {
		return fmt.Errorf("events: want a placeholder before the fallback, got %q", z.EventsPlaceholder)
	}
	if f := z.limit.Algorithm.Features(); z.EventsPlaceholder != "" && !f.Placeholders {
		return fmt.Errorf("events: a placeholder applies only to %s, not %s",
			algorithms.NamesWith(algorithms.Features{Placeholders: true}), z.limit.Algorithm)
	}
	if z.BurstPlaceholder == "" {
		return nil
	}
	if !strings.Contains(z.BurstPlaceholder, "{") {
		return fmt.Errorf("burst: want a placeholder before the fallback, got %q", z.BurstPlaceholder)
	}
	return nil
}

// validateQuotaLease checks the zone's own quota_lease: 1ms to its
// window, at most 10s; unset (0) and off (negative) pass.
func (z *Zone) validateQuotaLease() error {
	if z.QuotaLease <= 0 {
		return nil
	}
	longest := z.longestQuotaLease()
	bound := longest.String()
	if longest < algorithms.MaxQuotaLease {
		bound += " (the zone's window)"
	}
	return checkQuotaLease(time.Duration(z.QuotaLease), longest, bound)
}

// validateQuotaLease checks the handler's quota_lease, every zone's
// default: 1ms to 10s (each zone takes at most its window of it).
func (h *Handler) validateQuotaLease() error {
	if h.QuotaLease <= 0 {
		return nil
	}
	return checkQuotaLease(time.Duration(h.QuotaLease), algorithms.MaxQuotaLease, algorithms.MaxQuotaLease.String())
}

// checkQuotaLease fails, naming quota_lease, unless d is from 1ms to
// longest (which bound says).
func checkQuotaLease(d, longest time.Duration, bound string) error {
	if d < algorithms.MinQuotaLease || d > longest {
		return fmt.Errorf("quota_lease: want a duration from %v to %s, or off, got %v", algorithms.MinQuotaLease, bound, d)
	}
	return nil
}

// longestQuotaLease is the longest quota lease the zone takes: its window
// (a lease never outlives the window or slot it is counted in), at most
// 10s (a period zone: 10s).
func (z *Zone) longestQuotaLease() time.Duration {
	if z.limit.HasPeriod() {
		return algorithms.MaxQuotaLease
	}
	return min(z.limit.Window, algorithms.MaxQuotaLease)
}

// resolveQuotaLease sets the zone's quota lease in force: its own
// quota_lease, else the handler's (handlerLease), else 250ms, as at most
// its window; 0 (the zone does not lease) when that is off, on a store
// that holds no leases (noLeases: the embedded store), in a zone that settles after the response or waits
// (count_status, cost_from_response, concurrency, max_delay: their
// reservations are Redis's to adjust), and in dry run (the zone's or the
// handler's: a dry run counts every request in Redis). Zones of one name
// need not agree on it: a lease is one instance's, of its own requests.
func (z *Zone) resolveQuotaLease(handlerLease caddy.Duration, handlerDryRun, noLeases bool) {
	z.quotaLease = 0
	if noLeases || z.DryRun || handlerDryRun || z.settle.any || z.limit.MaxDelay > 0 {
		return
	}
	d := time.Duration(cmp.Or(z.QuotaLease, handlerLease))
	switch {
	case d < 0:
		return
	case d == 0:
		d = algorithms.DefaultQuotaLease
	}
	z.quotaLease = min(d, z.longestQuotaLease())
}

// provisionAdaptive gives an adaptive zone its limiters: those a running
// config holds under the same name, events, min and classes, else new.
func (z *Zone) provisionAdaptive(ctx caddy.Context, name string) error {
	if err := z.setup(name); err != nil {
		return err
	}
	if err := z.loadMatchers(ctx); err != nil {
		return err
	}
	cfg := z.limiterConfig()
	key := fmt.Sprintf("%s\x00%d\x00%d\x00%s", name, cfg.Max, cfg.Min, strings.Join(z.PriorityClasses, "\x00"))
	v, _, err := limiterSets.LoadOrNew(key, func() (caddy.Destructor, error) {
		return newLimiterSet(cfg), nil
	})
	if err != nil {
		return err
	}
	set := v.(*limiterSet)
	set.reconfigure(cfg)
	z.shed = &adaptiveZone{name: name, poolKey: key, set: set}
	publishShedZone(name, set)
	return nil
}

// cleanupAdaptive lets go of the zone's limiters.
func (z *Zone) cleanupAdaptive() {
	if z.shed != nil {
		if deleted, _ := limiterSets.Delete(z.shed.poolKey); deleted {
			withdrawShedZone(z.name, z.shed.set)
		}
	}
}
