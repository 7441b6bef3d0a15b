package sluice

import (
	"strconv"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// zoneRuntime is what a zone keeps while it serves, apart from its
// configuration (Zone): values built once from its name, its collectors,
// its period cache, an adaptive zone's limiters and its observer. Zone
// provisioning (zone_setup.go) creates it; the zone's store adds the
// observer (Handler.provisionBackend).
type zoneRuntime struct {
	exceeded  error  // the error of a rejection by this zone, built once
	nameValue any    // the name as the value of {http.rate_limit.exceeded.name}, boxed once
	quoted    string // the name as an sf-string, for the RateLimit header and the problem JSON

	periods *algorithms.PeriodCache // a period zone's boundaries around now; nil without one
	delay   *delayMetrics           // nil without max_delay
	settled settleMetrics           // what the zone settles after responses
	shed    *adaptiveZone           // an adaptive zone's limiters and answers; nil on other zones

	zoneObserver // what records its decisions (observe.go), set with its store
}

// newZoneRuntime is the runtime of zone name before provisioning adds to
// it: exceeded is the error of its rejections.
func newZoneRuntime(name string, exceeded error) zoneRuntime {
	return zoneRuntime{exceeded: exceeded, nameValue: name, quoted: strconv.Quote(name)}
}

// zoneObserver is what the observer keeps of one zone: its counters, the
// throttles of its log lines, and its top offenders' sketches (the zone
// name's, shared by every handler that declares it, across reloads).
type zoneObserver struct {
	metrics   zoneMetrics
	dryRunLog *throttle // the dry-run line
	rejectLog *throttle // the sampled rejection line
	top       *zoneTop
	topCounts topCounter // where its denials count: top's window or pending sketch
}
