package sluice

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// Zone defaults, applied in provision.
const (
	defaultAlgorithm = algorithms.SlidingWindow
	defaultCost      = 1
)

// quotaLeaseOff is quota_lease off, as the Caddyfile writes it in JSON:
// any negative value is off.
const quotaLeaseOff = caddy.Duration(-1)

// zoneName is what a zone may be called: it appears literally in Redis keys
// and headers, so no spaces, quotes or braces.
var zoneName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// Zone is one rate limit: the requests it sees, the key that tells their
// clients apart, and the limit each key gets.
type Zone struct {
	// Match selects the requests this zone sees. Default: all.
	MatcherSetsRaw caddyhttp.RawMatcherSets `json:"match,omitempty" caddy:"namespace=http.matchers"`

	// Key tells clients apart; it is a template of placeholders, such as
	// "{http.request.header.X-API-Key}". Required. A placeholder that is
	// empty expands to "": such requests share one bucket.
	Key string `json:"key,omitempty"`

	// Algorithm names the zone's algorithm, one of those docs/algorithms.md
	// describes (the table in algorithms/table.go). Default: sliding_window.
	Algorithm string `json:"algorithm,omitempty"`

	// MaxEvents is how many events each key may have per Window. Required.
	MaxEvents int64 `json:"max_events,omitempty"`

	// Window is the period MaxEvents applies to (for token_bucket, the
	// refill rate is MaxEvents per Window). Required, 1ms to 366 days;
	// for concurrency it is how long a slot lives if its Caddy dies, and
	// defaults to 1m.
	Window caddy.Duration `json:"window,omitempty"`

	// Period makes a calendar quota instead of a Window: day, week, month
	// or year. MaxEvents apply to each period, which starts at local
	// midnight, on Monday (ISO week), on the 1st or on 1 January in
	// TimeZone; a day is as long as the zone's clock says (23 or 25 hours
	// across DST). The zone is fixed_window (the default with a period;
	// naming another algorithm is an error), counted in the period that
	// holds the store's clock (Redis TIME). Excludes Window.
	Period string `json:"period,omitempty"`

	// TimeZone is the IANA time zone (e.g. "Europe/Berlin") Period follows;
	// the time zone database is built in. Only with Period. Default: UTC.
	TimeZone string `json:"time_zone,omitempty"`

	// EventsPlaceholder gives each request its own limit: a placeholder,
	// such as "{jwt.plan_limit}" or an output of Caddy's map, expanded per
	// request; MaxEvents is then the fallback, for a value that is empty,
	// not a whole number, or outside 1 to 10^9 (or what the algorithm
	// accepts: sliding_log at most 10,000). Default: none, MaxEvents for
	// every request.
	EventsPlaceholder string `json:"events_placeholder,omitempty"`

	// Burst is token_bucket's capacity. Default: MaxEvents (with
	// EventsPlaceholder, the request's events).
	Burst int64 `json:"burst,omitempty"`

	// BurstPlaceholder (token_bucket only) gives each request its own
	// capacity, as EventsPlaceholder does its events; Burst is the
	// fallback (when Burst is 0, the request's events). Default: none.
	BurstPlaceholder string `json:"burst_placeholder,omitempty"`

	// MaxDelay (token_bucket only) lets a request over the limit wait up
	// to this long for its turn instead of being rejected: it is admitted
	// with a reservation counted in the store, and held until then. At
	// most 1m; a handler holds at most 1024 requests waiting at once, and
	// at most 128 of one key (so one hot key cannot take every place), and
	// past either bound rejects those that would wait, as if their wait
	// were too long. Default: 0, reject at once (a wait holds a connection).
	MaxDelay caddy.Duration `json:"max_delay,omitempty"`

	// Cost is the units a request takes: an integer, or a placeholder that
	// expands to one. A placeholder that does not expand to a positive
	// integer costs 1; a cost above the limit is always denied. Default: 1.
	// Not on a concurrency zone: each request takes one slot.
	Cost string `json:"cost,omitempty"`

	// IPv4Prefix and IPv6Prefix group client addresses by network: with
	// them, {client_ip} and {remote_host} in Key expand to the network
	// (e.g. 203.0.113.0/24). Default: the whole address.
	IPv4Prefix int `json:"ipv4_prefix,omitempty"`
	IPv6Prefix int `json:"ipv6_prefix,omitempty"`

	// DryRun makes this zone count without ever rejecting.
	DryRun bool `json:"dry_run,omitempty"`

	// CountStatus lists the response statuses that count, as codes
	// ("401") or classes ("5xx"): the cost is reserved when the request is
	// admitted and given back when its response's status is not listed.
	// A request whose client left before its response (499) is never
	// given back: the upstream may have done the work. Default: every
	// response counts.
	CountStatus []string `json:"count_status,omitempty"`

	// CostFromResponse is a placeholder that expands, after the response,
	// to the request's real cost, e.g. "{http.response.header.X-Usage-Tokens}":
	// Cost is reserved up front, then the difference is given back or
	// taken (beyond the limit: a debt, at most one more limit). A value
	// that is not a non-negative integer, as when the client left before
	// the response, leaves the reservation as it is.
	CostFromResponse string `json:"cost_from_response,omitempty"`

	// Overrides lets an operator set one key's limit through the admin API
	// (PUT /rate_limit/zones/<zone>/keys/<key>/limit, or `caddy rate-limit
	// limit`): events (and for token_bucket burst), optionally for a while
	// (expires_in). An override wins over MaxEvents, EventsPlaceholder and
	// their bursts; it is kept in the store beside the key's state (on
	// Redis, the same hash tag) and read in the same atomic call as each
	// decision, so every instance applies a change at once, without a
	// reload. Its price: a Redis read per decision of this zone, and no
	// deny cache (a denied flood costs a Redis call per request, as
	// count_status does). Zones without it read nothing. Default: off.
	Overrides bool `json:"overrides,omitempty"`

	// Ban shuts a key this zone denies out of the zone for this long from
	// the denial (the trip), on every instance: its requests are rejected
	// with Retry-After = the ban's remaining time and r=0, and consume
	// nothing in any zone. The ban is kept in the store beside the key's
	// state (on Redis, the same hash tag), set in the same atomic call as
	// the denial and read with each decision of the key; denials are
	// cached locally until the ban ends. The admin API shows it
	// (banned_seconds) and DELETE of the key lifts it on every instance.
	// Whole seconds, from 1s to 366 days; a dry-run zone never bans.
	// Default: none (nothing is read).
	Ban caddy.Duration `json:"ban,omitempty"`

	// QuotaLease is, on Redis, the longest an instance holds a quota
	// lease of this zone: units of a hot key's quota that Redis counted
	// for it in the same atomic call as an admission, which it then
	// admits from in process, without a Redis call, until they are spent
	// or the lease ends (docs/configuration.md, Quota leases). Not a concurrency
	// zone's slot. 1ms to the zone's window, at most 10s.
	// Default (0): the handler's QuotaLease, else 250ms (either at most
	// the window); negative: off, every decision is a Redis call. Not
	// applied on the embedded store, nor in zones that settle or wait
	// (count_status, cost_from_response, concurrency, max_delay) or
	// count in dry run (this zone's or the handler's dry_run).
	QuotaLease caddy.Duration `json:"quota_lease,omitempty"`

	// Adaptive tunes an adaptive zone's limit (algorithm adaptive): its
	// floor, start and tolerance. Only on an adaptive zone.
	Adaptive *AdaptiveConfig `json:"adaptive,omitempty"`

	// Priority is a placeholder whose value is a request's class, one of
	// PriorityClasses (most important first; a value not listed is the
	// last class), e.g. "{jwt.tier}" or a map's output: never a header a
	// client sets, which it can forge. On adaptive and concurrency zones.
	Priority        string   `json:"priority,omitempty"`
	PriorityClasses []string `json:"priority_classes,omitempty"`

	// Reserve is the fraction of the limit only the first class may use:
	// class i of n uses up to floor(limit × (1 − reserve × i/(n−1))).
	// 0 to 0.9; default 0.2. With fewer than two classes it does not apply.
	Reserve *float64 `json:"reserve,omitempty"`

	// Status is an adaptive zone's status when it sheds a request.
	// Default: 503 (the handler's status does not apply).
	Status int `json:"status,omitempty"`

	name      string
	keyPrefix string // the store's key prefix + name + ":" (storePrefix)
	keyVar    string // Key's variable when Key is one placeholder
	limit     algorithms.Limit
	cost      int64  // the static cost; 0 when Cost is a placeholder
	policy    string // this zone's RateLimit-Policy list member (static limit)
	dynamic   bool   // the limit comes from the request (EventsPlaceholder, BurstPlaceholder)
	eventsVar string // EventsPlaceholder's variable when it is one placeholder
	burstVar  string // BurstPlaceholder's, likewise
	matchers  caddyhttp.MatcherSets
	settle    zoneSettle // what is done after the response
	// matchClaims: a matcher names {jwt.*}, so matchers run with the
	// handler's own claims
	matchClaims bool
	// quotaLease is the zone's quota lease in force (resolveQuotaLease):
	// its requests' Quota.For; 0 when the zone does not lease
	quotaLease time.Duration

	classes priorityClasses // priority and reserve, derived in setup

	zoneRuntime // what the zone keeps while it serves (zone_runtime.go)
}

// UnmarshalJSON decodes a zone strictly, as Caddy decodes a module (an
// unknown field is an error), reading quota_lease itself (quotaLeaseJSON).
func (z *Zone) UnmarshalJSON(b []byte) error {
	type plain Zone // Zone's fields, without this method
	aux := struct {
		*plain
		QuotaLease json.RawMessage `json:"quota_lease,omitempty"` // shadows plain's
	}{plain: (*plain)(z)}
	if err := caddy.StrictUnmarshalJSON(b, &aux); err != nil {
		return err
	}
	return quotaLeaseJSON(aux.QuotaLease, &z.QuotaLease, "; at most the zone's window")
}

// quotaLeaseJSON decodes the JSON quota_lease raw into dst: "off" is off
// (quotaLeaseOff), as in the Caddyfile, and so is a negative duration;
// absent or null leaves dst unset. A value that is no duration is an
// error that names the field (Caddy's own says only "time: invalid
// duration"); the range is checked by Validate, bound being what it adds
// to the range in this error.
func quotaLeaseJSON(raw json.RawMessage, dst *caddy.Duration, bound string) error {
	switch string(raw) {
	case "", "null":
		return nil
	case `"off"`:
		*dst = quotaLeaseOff
		return nil
	}
	var d caddy.Duration
	if err := d.UnmarshalJSON(raw); err != nil {
		return fmt.Errorf(`quota_lease: want a duration from %v to %v%s, or "off" (or a negative duration), got %s`,
			algorithms.MinQuotaLease, algorithms.MaxQuotaLease, bound, raw)
	}
	*dst = d
	return nil
}

// zoneSettle is what a zone does after the response, derived in setup.
type zoneSettle struct {
	any      bool      // the zone settles at all
	statuses statusSet // count_status; empty: every status counts
	slot     bool      // algorithm concurrency: each request holds a slot
}

// AdaptiveConfig tunes an adaptive zone's limit.
type AdaptiveConfig struct {
	// Min is the floor of the limit. Default: min(4, events).
	Min int `json:"min,omitempty"`
	// Initial is where the limit starts. Default: clamp(20, min, events).
	Initial int `json:"initial,omitempty"`
	// Tolerance is how far over its baseline latency may go before it
	// is read as overload: above 1. Default: 1.5.
	Tolerance float64 `json:"tolerance,omitempty"`
}

// priorityClasses are a zone's priority classes, derived in setup.
type priorityClasses struct {
	placeholder string   // expands to a request's class
	names       []string // most important first
	reserve     float64
}

// n is how many classes there are: at least one.
func (c priorityClasses) n() int { return max(len(c.names), 1) }

// of is the class of a request: the index of its placeholder's value
// among the names, else the last class.
func (c priorityClasses) of(repl *caddy.Replacer) int {
	if len(c.names) < 2 {
		return 0
	}
	v := repl.ReplaceKnown(c.placeholder, "")
	if i := slices.Index(c.names, v); i >= 0 {
		return i
	}
	return len(c.names) - 1
}

// name is class i's name, for metrics and logs ("" without classes).
func (c priorityClasses) name(i int) string {
	if i < len(c.names) {
		return c.names[i]
	}
	return ""
}
