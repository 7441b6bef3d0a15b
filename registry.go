package sluice

import (
	"context"
	"fmt"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// declared is, per loaded config, the limit of each zone name. Zone names
// are global: handlers that declare the same zone share its counters, so
// they must agree on its limit. Keyed by the config's context, so that a
// reload may change a limit: the new config is checked against itself only.
// A config is told apart by its metrics registry, which Caddy makes anew
// for each config load and shares among all its modules (the context
// itself differs per server).
var declared = struct {
	sync.Mutex
	byConfig map[*prometheus.Registry]map[string]algorithms.Limit
}{byConfig: make(map[*prometheus.Registry]map[string]algorithms.Limit)}

// declare records zone z for the config of ctx, or fails when the config
// already gives the zone another limit.
func declare(ctx caddy.Context, z *Zone) error {
	declared.Lock()
	defer declared.Unlock()
	config := ctx.GetMetricsRegistry()
	zones, ok := declared.byConfig[config]
	if !ok {
		zones = make(map[string]algorithms.Limit)
		declared.byConfig[config] = zones
		context.AfterFunc(ctx, func() { // the config is unloaded
			declared.Lock()
			defer declared.Unlock()
			delete(declared.byConfig, config)
		})
	}
	if prev, ok := zones[z.name]; ok && prev != z.limit {
		return fmt.Errorf("declared twice with different limits: %s here and %s in another rate_limit; handlers that name the same zone share its counters, so their limits must agree",
			describe(z.limit), describe(prev))
	}
	zones[z.name] = z.limit
	return nil
}

func describe(l algorithms.Limit) string {
	s := fmt.Sprintf("%s %d per %v", l.Algorithm, l.Events, l.Window)
	if l.Algorithm == algorithms.TokenBucket {
		s += fmt.Sprintf(" burst %d", l.Capacity())
	}
	return s
}
