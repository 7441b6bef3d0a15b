package sluice

import (
	"fmt"
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/sluicehq/caddy-sluice/adaptive"
)

// algorithmAdaptive is `algorithm adaptive`: a per-instance limit on
// requests in flight that follows the upstream's latency (package
// adaptive). It is decided in process, before the store, and is not an
// algorithm of algorithms/table.go.
const algorithmAdaptive = "adaptive"

// Adaptive zone defaults and bounds.
const (
	defaultShedStatus = 503
	defaultReserve    = 0.2
	maxReserve        = 0.9
	// maxAdaptiveEvents is the largest ceiling of an adaptive limit.
	maxAdaptiveEvents = 1_000_000
	// adaptiveBackend is where the admin API says an adaptive zone is
	// decided: in this instance's memory, never in Redis.
	adaptiveBackend = "memory"
)

func (z *Zone) isAdaptive() bool { return z.Algorithm == algorithmAdaptive }

func (z *Zone) setupClasses() priorityClasses {
	c := priorityClasses{placeholder: z.Priority, names: z.PriorityClasses, reserve: defaultReserve}
	if z.Reserve != nil {
		c.reserve = *z.Reserve
	}
	return c
}

// setupAdaptive sets an adaptive zone's defaults and derived fields.
func (z *Zone) setupAdaptive() error {
	z.classes = z.setupClasses()
	if z.Status == 0 {
		z.Status = defaultShedStatus
	}
	z.keyVar = singlePlaceholder(z.Key)
	return nil
}

// limiterConfig is the adaptive limiter's configuration of the zone.
func (z *Zone) limiterConfig() adaptive.Config {
	cfg := adaptive.Config{Max: int(z.MaxEvents), Classes: z.classes.n(), Reserve: z.classes.reserve}
	if a := z.Adaptive; a != nil {
		cfg.Min, cfg.Initial, cfg.Tolerance = a.Min, a.Initial, a.Tolerance
	}
	return cfg
}

// validateAdaptive checks an adaptive zone: its limits, its classes, and
// none of the options that count in the store.
func (z *Zone) validateAdaptive() error {
	refused := []struct {
		option string
		set    bool
	}{
		{"window", z.Window != 0},
		{"period", z.Period != "" || z.TimeZone != ""},
		{"cost", z.Cost != ""},
		{"burst", z.Burst != 0 || z.BurstPlaceholder != ""},
		{"ban", z.Ban != 0},
		{"overrides", z.Overrides},
		{"quota_lease", z.QuotaLease != 0},
		{"count_status", z.CountStatus != nil},
		{"cost_from_response", z.CostFromResponse != ""},
	}
	for _, r := range refused {
		if r.set {
			return fmt.Errorf("%s: not on an adaptive zone (it limits requests in flight on this instance, from their latency); remove %s", r.option, r.option)
		}
	}
	if z.EventsPlaceholder != "" {
		return fmt.Errorf("events: an adaptive zone's events is its limit's ceiling, a number, not a placeholder")
	}
	if z.MaxEvents < 1 || z.MaxEvents > maxAdaptiveEvents {
		return fmt.Errorf("events: want the ceiling of the limit, from 1 to %d, got %d", maxAdaptiveEvents, z.MaxEvents)
	}
	if z.limit.MaxDelay > maxMaxDelay || z.MaxDelay > caddy.Duration(maxMaxDelay) {
		return fmt.Errorf("max_delay: want at most %v, got %v", maxMaxDelay, z.MaxDelay)
	}
	if err := z.validateAdaptiveLimits(); err != nil {
		return err
	}
	if z.Status < 400 || z.Status > 599 {
		return fmt.Errorf("status: want a 4xx or 5xx code, got %d", z.Status)
	}
	if err := z.validatePriority(); err != nil {
		return err
	}
	if err := checkBraces("key", z.Key); err != nil {
		return err
	}
	if z.IPv4Prefix < 0 || z.IPv4Prefix > 32 {
		return fmt.Errorf("ipv4_prefix: want 0 to 32 bits, got %d", z.IPv4Prefix)
	}
	if z.IPv6Prefix < 0 || z.IPv6Prefix > 128 {
		return fmt.Errorf("ipv6_prefix: want 0 to 128 bits, got %d", z.IPv6Prefix)
	}
	return nil
}

func (z *Zone) validateAdaptiveLimits() error {
	a := z.Adaptive
	if a == nil {
		return nil
	}
	events := int(z.MaxEvents)
	if a.Min < 0 || a.Min > events {
		return fmt.Errorf("adaptive: min: want from 1 to events (%d), got %d", events, a.Min)
	}
	floor := a.Min
	if floor == 0 {
		floor = adaptive.DefaultMin(events)
	}
	if a.Initial != 0 && (a.Initial < floor || a.Initial > events) {
		return fmt.Errorf("adaptive: initial: want from min (%d) to events (%d), got %d", floor, events, a.Initial)
	}
	if a.Tolerance != 0 && a.Tolerance <= 1 {
		return fmt.Errorf("adaptive: tolerance: want a ratio above 1 (latency over its baseline read as overload, e.g. 1.5), got %v", a.Tolerance)
	}
	return nil
}

// validateClasses checks a zone that is not adaptive: only a concurrency
// zone has classes, and only an adaptive zone a status or adaptive block.
func (z *Zone) validateClasses() error {
	switch {
	case z.Adaptive != nil:
		return fmt.Errorf("adaptive: applies only to algorithm adaptive, not %s", z.Algorithm)
	case z.Status != 0:
		return fmt.Errorf("status: a zone's own status applies only to algorithm adaptive (the handler's status answers %s)", z.Algorithm)
	case (z.Priority != "" || z.Reserve != nil) && !z.limit.Algorithm.Features().InFlight:
		return fmt.Errorf("priority and reserve apply only to algorithm adaptive and concurrency, not %s", z.Algorithm)
	}
	if err := z.validatePriority(); err != nil {
		return err
	}
	n := len(z.PriorityClasses)
	if n < 2 {
		return nil
	}
	if z.Overrides {
		return fmt.Errorf("priority: not with overrides: an override sets a key's limit in the store, where classes have no share; remove overrides or priority")
	}
	reserve := z.setupClasses().reserve
	if share := adaptive.Share(int(z.MaxEvents), n-1, n, reserve); share < 1 {
		return fmt.Errorf("reserve: %v%% of events %d leaves class %q no request in flight (floor(%d × (1 − %v)) = 0); lower reserve or raise events",
			reserve*100, z.MaxEvents, z.PriorityClasses[n-1], z.MaxEvents, reserve)
	}
	return nil
}

// validatePriority checks priority and reserve.
func (z *Zone) validatePriority() error {
	if z.Reserve != nil && (*z.Reserve < 0 || *z.Reserve > maxReserve) {
		return fmt.Errorf("reserve: want from 0%% to %.0f%%, got %v%%", maxReserve*100, *z.Reserve*100)
	}
	if z.Priority == "" {
		if len(z.PriorityClasses) > 0 {
			return fmt.Errorf("priority: classes without a placeholder to read them from")
		}
		return nil
	}
	if !strings.Contains(z.Priority, "{") {
		return fmt.Errorf("priority: want a placeholder before the classes, such as {jwt.tier}, got %q", z.Priority)
	}
	if err := checkBraces("priority", z.Priority); err != nil {
		return err
	}
	if len(z.PriorityClasses) == 0 {
		return fmt.Errorf("priority: want the classes after the placeholder, most important first, e.g. critical normal bulk")
	}
	for i, c := range z.PriorityClasses {
		if slices.Contains(z.PriorityClasses[:i], c) {
			return fmt.Errorf("priority: class %q is listed twice", c)
		}
	}
	return nil
}
