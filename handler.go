package sluice

import (
	"encoding/json"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/jwtclaims"
)

// Defaults, applied in Provision.
const (
	defaultStatus      = http.StatusTooManyRequests
	defaultFailureMode = failOpen
)

// Handler limits the rate of requests. Each request is matched to zero or
// more zones; each zone builds a key from placeholders, and one atomic Redis
// script decides for all of them: the request is admitted only if every zone
// admits it, and a denied request consumes nothing.
type Handler struct {
	// Zones by name. Zone names are global: handlers that declare the same
	// zone share its counters. The field name is mholt/caddy-ratelimit's.
	Zones map[string]*Zone `json:"rate_limits,omitempty"`

	// Redis holds the counters. Without it, counters live in this
	// instance's memory (same algorithms, one instance only), and a warning
	// is logged at start.
	Redis *RedisConfig `json:"redis,omitempty"`

	// FailureMode decides requests while Redis fails: "open" (the default)
	// admits them, "closed" answers 503, "local" decides them with this
	// instance's in-memory counters (per-instance limits, fresh at the
	// outage's start) until Redis answers again.
	FailureMode string `json:"failure_mode,omitempty"`

	// Headers lists the rate-limit header styles to send: "ietf"
	// (RateLimit-Policy and RateLimit), "legacy" (RateLimit-Limit,
	// -Remaining, -Reset), "x" (X-RateLimit-*), or "none". Default: ietf
	// and legacy. Retry-After is always sent on a rejection. "pk", with
	// "ietf", adds the partition key (the hash of the zone's key, never
	// the key) to each RateLimit member.
	Headers []string `json:"headers,omitempty"`

	// Status is the status code of a rejection. Default: 429.
	Status int `json:"status,omitempty"`

	// ProblemDetails gives a rejection an RFC 9457 application/problem+json
	// body (type quota-exceeded, the zones that denied in
	// violated-policies): the handler writes it, unless the site has
	// handle_errors routes, which shape rejections either way and find the
	// same JSON in {http.rate_limit.problem}. Off by default.
	ProblemDetails bool `json:"problem_details,omitempty"`

	// DryRun decides, counts and sets headers, but never rejects.
	DryRun bool `json:"dry_run,omitempty"`

	// LogKey logs the expanded key of rejections, adds it to the
	// rate_limit_exceeded event, and makes the admin API's top offenders
	// show expanded keys instead of their hashes. Off by default: keys
	// may be secrets.
	LogKey bool `json:"log_key,omitempty"`

	// Jitter adds up to this fraction of random time to Retry-After (0.2:
	// up to 20% more), so rejected clients do not all return at once.
	// Default: 0.
	Jitter float64 `json:"jitter,omitempty"`

	// QuotaLease is every zone's quota_lease unless it sets its own (see
	// Zone.QuotaLease): 1ms to 10s, applied to a zone as at most its
	// window. Default (0): 250ms; negative: off in every zone that does
	// not set its own.
	QuotaLease caddy.Duration `json:"quota_lease,omitempty"`

	// DisableMetrics keeps this handler's decisions out of Caddy's
	// Prometheus metrics (the per-zone families: decisions, near limit,
	// deny cache hits, delays, settlements, and its Redis calls), as
	// mholt/caddy-ratelimit's option of that name does. Other handlers'
	// decisions, in zones of the same name too, are still counted; quota
	// lease units are the zone's, counted by whichever handler counts
	// them. Default: off.
	DisableMetrics bool `json:"disable_metrics,omitempty"`

	// JWT verifies the request's token and enables {jwt.<claim>} in keys.
	// Without it, a {jwt.*} placeholder in a zone fails validation: it
	// would always expand to "".
	JWT *jwtclaims.Config `json:"jwt,omitempty"`

	// Distributed, Storage and SweepInterval are mholt/caddy-ratelimit's
	// options. They are accepted, with a warning, and ignored: Redis does
	// their work.
	Distributed   json.RawMessage `json:"distributed,omitempty"`
	Storage       json.RawMessage `json:"storage,omitempty"`
	SweepInterval caddy.Duration  `json:"sweep_interval,omitempty"`

	zones     []*Zone   // sorted by name, for stable header order
	shedZones []*Zone   // adaptive zones, by name: decided in process, before zones
	zoneSets  [][]*Zone // every set of zones a request can match, if few
	verifier  *jwtclaims.Verifier
	backend   backend
	client    string        // key of the shared Redis client in clients, if any
	shared    *sharedClient // that client, if any
	// registrations are this handler's zones in the registry, set as the
	// last step of a successful Provision and withdrawn by Cleanup.
	registrations []*registration
	ownClaims     bool     // a zone's template or matcher names {jwt.*}: answered by own verifier only
	waiting       *waiting // requests held for their turn (max_delay); nil without a max_delay zone
	headers       headerStyles
	ctx           caddy.Context
	events        *caddyevents.App
	logger        *zap.Logger
	errorChains   *errorChains // the error routes rejections are answered with (reject.go)
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.rate_limit",
		New: func() caddy.Module { return new(Handler) },
	}
}

// maxZoneSetBits is the most zones a handler keeps every set of (2^6 = 64
// sets, 192 pointers): the zones of a request are then one of these,
// shared, and cost no allocation. (A slice of them held with the store
// requests in the verdict would escape with them.)
const maxZoneSetBits = 6

// zoneSets are zones' subsets by bit mask (bit i: zones[i]), in zones'
// order, or nil when there are more than maxZoneSetBits zones.
func zoneSets(zones []*Zone) [][]*Zone {
	if len(zones) > maxZoneSetBits {
		return nil
	}
	sets := make([][]*Zone, 1<<len(zones))
	for set := range sets {
		for i, z := range zones {
			if set&(1<<i) != 0 {
				sets[set] = append(sets[set], z)
			}
		}
	}
	return sets
}
