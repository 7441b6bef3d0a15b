package sluice

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// zoneRegistry is the one record of the zones in force: per zone name, every
// provisioned handler's declaration of it, oldest first. A handler
// registers its zones as the last step of a successful Provision and
// unregisters exactly those in Cleanup, so a failed or abandoned config
// load leaves the running config's zones whole.
//
// Zone names are global: handlers that declare the same zone share its
// counters, so within one config they must agree on what it counts
// (counting). A reload
// may change a limit: the new config is checked against itself only. A
// config is told apart by its metrics registry, which Caddy makes anew for
// each config load and shares among all its modules.
//
// The admin API serves each name's newest registration: after a reload,
// the new config's; after a failed load, still the running one's.
var zoneRegistry = struct {
	sync.Mutex
	byName map[string][]*registration
}{byName: make(map[string][]*registration)}

// registration is one handler's declaration of one zone, with what the
// admin API needs to serve it: never the handler itself.
type registration struct {
	zone   *Zone
	config *prometheus.Registry
	stores *stores
	dryRun bool // the handler's dry_run: its zones ban no one
	logKey bool // the handler's log_key: the admin API's audit lines show the key
}

// registerZones records zones for config, served by s under a handler
// whose dry_run is dryRun and log_key logKey, or records none and fails
// when the config already declares one of them counting otherwise.
func registerZones(config *prometheus.Registry, zones []*Zone, s *stores, dryRun, logKey bool) ([]*registration, error) {
	zoneRegistry.Lock()
	defer zoneRegistry.Unlock()
	for _, z := range zones {
		for _, prev := range zoneRegistry.byName[z.name] {
			if prev.config != config {
				continue
			}
			if err := agree(z, prev.zone); err != nil {
				return nil, err
			}
		}
	}
	regs := make([]*registration, len(zones))
	for i, z := range zones {
		regs[i] = &registration{zone: z, config: config, stores: s, dryRun: dryRun, logKey: logKey}
		zoneRegistry.byName[z.name] = append(zoneRegistry.byName[z.name], regs[i])
	}
	return regs, nil
}

// countingTerm is one thing that decides what a zone counts: the option
// that sets it, its value (compared with ==) and how an error shows it.
type countingTerm struct {
	option string
	value  any
	text   string
}

// counting lists what decides what z counts. Handlers that declare one
// zone share its counters (and each keeps a deny cache of them), so they
// must agree on every term: a handler that refunds what another does not
// (count_status), or charges another cost (cost_from_response), would
// count under the other's feet. Cost, matchers, keys and dry_run are each
// handler's own: they choose what is counted where, not how. New options
// that decide counting (ban) belong here.
func (z *Zone) counting() []countingTerm {
	limit := z.limit
	limit.Algorithm = ""          // a term of its own
	limit.Calendar.Location = nil // each load has its own: compared by name (time_zone)
	limitText := z.limit.String()
	if z.limit.MaxDelay > 0 {
		limitText += fmt.Sprintf(" max_delay %v", z.limit.MaxDelay)
	}
	algorithm := z.limit.Algorithm
	var tuning AdaptiveConfig // an adaptive zone's, whose limit is its ceiling (events)
	if z.isAdaptive() {
		algorithm = algorithmAdaptive
		limit = algorithms.Limit{Events: z.MaxEvents}
		limitText = fmt.Sprintf("events %d", z.MaxEvents)
		if z.Adaptive != nil {
			tuning = *z.Adaptive
		}
	}
	return []countingTerm{
		{"algorithm", algorithm, string(algorithm)},
		{"limit", limit, limitText},
		{"period", z.limit.Calendar.Period, orNone(z.Period)},
		{"time_zone", z.timeZoneName(), z.timeZoneName()},
		{"events", z.EventsPlaceholder, orNone(z.EventsPlaceholder)}, // a placeholder: the limit per request
		{"burst", z.BurstPlaceholder, orNone(z.BurstPlaceholder)},
		{"count_status", z.settle.statuses, orNone(strings.Join(z.CountStatus, " "))},
		{"cost_from_response", z.CostFromResponse, orNone(z.CostFromResponse)},
		{"overrides", z.Overrides, onOff(z.Overrides)},
		{"ban", z.Ban, orNone(banText(z.Ban))},
		{"priority", z.priorityText(), orNone(z.priorityText())}, // a concurrency zone's classes share its limit
		{"reserve", z.classReserve(), fmt.Sprintf("%v%%", z.classReserve()*100)},
		{"adaptive", tuning, orNone(tuning.text())},
	}
}

// text is an adaptive block's settings, as the Caddyfile writes them
// ("" when none is set).
func (c AdaptiveConfig) text() string {
	var parts []string
	if c.Min != 0 {
		parts = append(parts, fmt.Sprintf("min %d", c.Min))
	}
	if c.Initial != 0 {
		parts = append(parts, fmt.Sprintf("initial %d", c.Initial))
	}
	if c.Tolerance != 0 {
		parts = append(parts, fmt.Sprintf("tolerance %v", c.Tolerance))
	}
	return strings.Join(parts, " ")
}

// priorityText is the zone's priority placeholder and classes, as the
// Caddyfile writes them ("" without priority).
func (z *Zone) priorityText() string {
	return strings.TrimSpace(z.Priority + " " + strings.Join(z.PriorityClasses, " "))
}

// classReserve is the reserve that applies: 0 with fewer than two classes.
func (z *Zone) classReserve() float64 {
	if len(z.PriorityClasses) < 2 {
		return 0
	}
	return z.setupClasses().reserve
}

// agree fails, naming the zone and each term that differs, unless z and
// prev, two declarations of one zone, count alike.
func agree(z, prev *Zone) error {
	here, there := z.counting(), prev.counting()
	var differ []string
	for i := range here {
		if here[i].value != there[i].value {
			differ = append(differ, fmt.Sprintf("%s %s here, %s in another rate_limit", here[i].option, here[i].text, there[i].text))
		}
	}
	if len(differ) == 0 {
		return nil
	}
	options := make([]string, len(here))
	for i, term := range here {
		options[i] = term.option
	}
	return fmt.Errorf("zone %s: declared twice, differently: %s; handlers that name the same zone share its counters, so they must agree on its %s",
		z.name, strings.Join(differ, "; "), strings.Join(options, ", "))
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// unregisterZones removes exactly the registrations registerZones returned.
func unregisterZones(regs []*registration) {
	zoneRegistry.Lock()
	defer zoneRegistry.Unlock()
	for _, r := range regs {
		name := r.zone.name
		list := slices.DeleteFunc(zoneRegistry.byName[name], func(x *registration) bool { return x == r })
		if len(list) == 0 {
			delete(zoneRegistry.byName, name)
			continue
		}
		zoneRegistry.byName[name] = list
	}
}

// lookupZone returns the registration in force for a zone name.
func lookupZone(name string) (*registration, bool) {
	zoneRegistry.Lock()
	defer zoneRegistry.Unlock()
	list := zoneRegistry.byName[name]
	if len(list) == 0 {
		return nil, false
	}
	return list[len(list)-1], true
}

// zonesInForce returns the registration in force of every zone, by name.
func zonesInForce() []*registration {
	zoneRegistry.Lock()
	defer zoneRegistry.Unlock()
	regs := make([]*registration, 0, len(zoneRegistry.byName))
	for _, name := range slices.Sorted(maps.Keys(zoneRegistry.byName)) {
		list := zoneRegistry.byName[name]
		regs = append(regs, list[len(list)-1])
	}
	return regs
}

// banText is a zone's ban as the Caddyfile writes it, or "".
func banText(ban caddy.Duration) string {
	if ban == 0 {
		return ""
	}
	return time.Duration(ban).String()
}
