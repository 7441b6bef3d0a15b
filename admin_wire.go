package sluice

// The admin API's wire types: what admin.api.rate_limit answers and
// takes, and what `caddy rate-limit` reads and sends. One definition of
// each, so that the API and the CLI cannot drift apart.

// adminMarkHeader is set, to adminMarkValue, on every answer of the
// admin API's /rate_limit/ routes, errors included: the CLI takes an
// answer without it for another server's (a site, a proxy, a Caddy
// without this module), whatever its status.
const (
	adminMarkHeader = "Sluice-Admin-Api"
	adminMarkValue  = "1"
)

// zoneInfo is an entry of GET /rate_limit/zones.
type zoneInfo struct {
	Name      string  `json:"name"`
	Algorithm string  `json:"algorithm"`
	Events    int64   `json:"events"`
	Window    float64 `json:"window"`
	Burst     int64   `json:"burst"` // the most one key takes at once: token_bucket's burst, else events
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
	// Overrides: the zone honours per-key limits set through this API.
	Overrides bool `json:"overrides,omitempty"`
	// Ban is a zone's ban in seconds (absent without one).
	Ban float64 `json:"ban,omitempty"`
	// QuotaLease is the zone's quota lease in force, in seconds: 0 when
	// the zone does not lease (off, the embedded store, a zone that
	// settles, waits or runs dry).
	QuotaLease float64 `json:"quota_lease"`
	// Adaptive is an adaptive zone's state on this instance (Events is
	// then its limit's ceiling, as Burst, Window 0, Backend "memory": it
	// is decided in this instance's memory, never in Redis); absent for
	// other zones.
	Adaptive *adaptiveInfo `json:"adaptive,omitempty"`
}

// adaptiveInfo is an adaptive zone's state on this instance, summed over
// its key values: its limit, the requests in flight, and its baseline
// latency (the lowest of its keys'; 0 until one is learned).
type adaptiveInfo struct {
	Limit           int     `json:"limit"`
	InFlight        int     `json:"in_flight"`
	BaselineSeconds float64 `json:"baseline_seconds"`
}

// keyState is the answer of GET /rate_limit/zones/<zone>/keys/<key>.
type keyState struct {
	Zone         string `json:"zone"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetSeconds int64  `json:"reset_seconds"`
	// InUse is, for a concurrency zone, the slots held now (requests in
	// flight across every instance).
	InUse *int64 `json:"in_use,omitempty"`
	// Override: the key has its own limit (PUT …/limit), which Limit shows.
	Override bool `json:"override,omitempty"`
	// BannedSeconds is, for a zone with a ban, how long the key's ban
	// lasts still (0: not banned); absent for other zones.
	BannedSeconds *int64 `json:"banned_seconds,omitempty"`
	// Leased is, for a zone that leases quota, the key's units in quota
	// leases not yet ended, used or not (they count as used in
	// Remaining); absent when none.
	Leased int64 `json:"leased,omitempty"`
}

// resetAnswer is the answer of DELETE /rate_limit/zones/<zone>/keys/<key>
// when the key was reset but the other instances could not be told (a
// reset told to every instance answers 204, with no body): Warning says
// what is missing, e.g. the Redis user's permission of the reset channel.
type resetAnswer struct {
	Reset   bool   `json:"reset"`
	Warning string `json:"warning,omitempty"`
}

// overrideBody is the body of PUT …/keys/<key>/limit: events and burst
// from 1 to 10^9 (burst only on token_bucket; absent or 0: events),
// expires_in a Caddy duration up to 366 days (absent: until cleared).
type overrideBody struct {
	Events    *int64 `json:"events"`
	Burst     int64  `json:"burst,omitempty"`
	ExpiresIn string `json:"expires_in,omitempty"`
}

// topKey is an entry of GET …/top: a key (its store key's hash, or with
// log_key the expanded key) and how many requests the zone denied it.
type topKey struct {
	Key    string `json:"key"`
	Denied uint64 `json:"denied"`
}

// overrideList is the answer of GET /rate_limit/zones/<zone>/overrides:
// a page of the zone's overrides in force, by key hash, and Next, the
// cursor of the following page (…/overrides?after=<next>), absent on the
// last page.
type overrideList struct {
	Zone      string          `json:"zone"`
	Overrides []overrideEntry `json:"overrides"`
	Next      string          `json:"next,omitempty"`
}

// overrideEntry is one key's override: KeyHash names the key as top
// offenders, the RateLimit header's pk and the audit lines do; Key is
// the key as it was given to PUT …/limit, only where the zone's handler
// has log_key and had it when the override was set. Events and Burst
// are the limit (Burst only on an algorithm with one: token_bucket);
// ExpiresInSeconds is how long it lasts still, rounded up, absent for an
// override that lasts until cleared.
type overrideEntry struct {
	KeyHash          string `json:"key_hash"`
	Key              string `json:"key,omitempty"`
	Events           int64  `json:"events"`
	Burst            int64  `json:"burst,omitempty"`
	ExpiresInSeconds *int64 `json:"expires_in_seconds,omitempty"`
}
