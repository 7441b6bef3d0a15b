// Package algorithms states what Sluice's rate limits mean: Limit, Request
// and Decision, the Store contract every store implements (store.go), each
// algorithm's Go twin, and the stores and wrappers built
// on them in plain Go (the in-memory store, the deny cache, the circuit
// breaker). It imports neither Caddy nor a Redis client: the Redis store
// is package redisstore, which runs the same algorithms as Lua.
//
// For other stores it exports two helpers every store shares, so that
// they answer alike: OverCapacityAt, which answers a cost above a zone's
// capacity without the store, and RetryOrDelay, which reads a zone's
// retry value as a retry after or a reservation's delay.
//
// Time is integer microseconds throughout, read from the store's clock
// (Redis TIME on Redis, one clock for every Caddy node) and from the caller
// in the …At functions.
package algorithms

import (
	"fmt"
	"time"
)

// Bounds on a Limit. Every algorithm counts in exact integers (Go int64,
// and doubles below 2^53 in the scripts) for any limit within them; a
// product such as events × window, which can pass both, goes through one
// exact helper (mulDiv in Go, mul_div in Lua).
const (
	MinWindow = time.Millisecond
	MaxWindow = 366 * 24 * time.Hour
	// MaxEvents bounds events and burst: 10^9 a minute, or 100,000 a day,
	// with any window.
	MaxEvents = 1_000_000_000
	// MaxLogEvents bounds a sliding_log's events: it keeps an entry per
	// request admitted in the window, up to one per event, and an exact
	// Retry-After may walk half of them.
	MaxLogEvents = 10_000
)

// Limit is one zone's limit: Events per Window, or for an algorithm with a
// burst (TokenBucket) a bucket of Burst tokens refilled at Events per
// Window.
type Limit struct {
	Algorithm Algorithm
	Events    int64
	Window    time.Duration
	Burst     int64 // token_bucket capacity; 0 means Events
	// MaxDelay (token_bucket only; 0, the default, rejects at once) is how
	// long a request over the limit may wait for its turn: it is admitted
	// with a reservation when its turn comes within MaxDelay, and the
	// handler holds it until then.
	MaxDelay time.Duration
	// Calendar, for a fixed_window zone with a period (`period`,
	// `time_zone`), is that period: the zone counts in the calendar period
	// holding the store's clock instead of a Window, which is then 0.
	Calendar Calendar
	// Periods, for such a zone, are the period boundaries around the
	// caller's clock, set per request (PeriodCache): the store counts in
	// the one holding its own clock (Periods.At), so one clock (Redis TIME)
	// decides. Being part of the Limit, they are part of what a DenyCache
	// compares and what a Settlement carries.
	Periods Periods
}

// HasPeriod reports whether l counts in calendar periods.
func (l Limit) HasPeriod() bool { return l.Calendar.Period != NoPeriod }

// Capacity is the most one key can take at once: Burst for a token bucket,
// else Events.
func (l Limit) Capacity() int64 {
	if l.Burst > 0 && l.Algorithm.Features().Burst {
		return l.Burst
	}
	return l.Events
}

// String describes l as its algorithm, events and window, e.g.
// "fixed_window 100 per 1m0s", with the capacity after them for an
// algorithm with a burst: "token_bucket 10 per 1s burst 20".
func (l Limit) String() string {
	if l.HasPeriod() {
		return fmt.Sprintf("%s %d per %s in %s", l.Algorithm, l.Events, l.Calendar.Period, l.Calendar.location())
	}
	s := fmt.Sprintf("%s %d per %v", l.Algorithm, l.Events, l.Window)
	if l.Algorithm.Features().Burst {
		s += fmt.Sprintf(" burst %d", l.Capacity())
	}
	return s
}

// Request asks for Cost units of Key under Limit. Key is the full store key,
// already hashed and prefixed.
type Request struct {
	Key   string
	Limit Limit
	Cost  int64
	// DryRun makes the zone advisory: it counts like the others, but its
	// denial does not deny the request.
	DryRun bool
	// Slot names this request's slot in a Concurrency zone (its hold on
	// one of the zone's events while in flight): random, unique per
	// request, given back by a Settlement with the same Slot.
	Slot string
	// Settles marks a request settled after its response (count_status,
	// cost_from_response, concurrency): its quota may come back early, so
	// a DenyCache answers it only while it is banned.
	Settles bool
	// Overrides marks a request of a zone with overrides: the store reads
	// its key's override in the same atomic call and decides with its
	// limit instead of Limit's events and burst (Decision.Override). A
	// DenyCache answers it only while it is banned: an override may be
	// raised at any moment. The store also decides its cost cap (CostCap).
	Overrides bool
	// BanSeconds, for a zone with a ban, is how long a denial of this zone
	// (a trip) shuts Key out: the store reads the key's ban in the same
	// atomic call as each decision and, while it lasts, denies with the
	// ban's remaining time as RetryAfter and Remaining 0 (Decision.Banned);
	// a denial in a consuming call sets it (Decision.BanStarted). A dry-run
	// zone never bans. 0: no ban, nothing read. (An int32 in the padding
	// after the bools: a Request is no larger for it.)
	BanSeconds int32
	// Quota is the request's ask for a quota lease (quota_lease.go); its
	// zero value leases nothing.
	Quota QuotaAsk
}

// Ban is r's ban as a duration (0: none).
func (r Request) Ban() time.Duration { return time.Duration(r.BanSeconds) * time.Second }

// Bans reports whether r can be banned: a zone with a ban that enforces.
func (r Request) Bans() bool { return r.BanSeconds > 0 && !r.DryRun }

// Leases reports whether r's zone leases quota.
func (r Request) Leases() bool { return r.Quota.For > 0 }

// ReadsLeases reports whether a store reads and writes the lease
// bookkeeping of r's key: r's zone leases and its holder tracks the key
// (QuotaAsk.Untracked).
func (r Request) ReadsLeases() bool { return r.Quota.For > 0 && !r.Quota.Untracked }

// AppliedMaxDelay is the max_delay the store decides r with: r's, but 0
// for a dry-run zone (advisory, it never holds a request) and for an
// algorithm without max_delay (Features), whose requests never wait.
func (r Request) AppliedMaxDelay() time.Duration {
	if r.DryRun || !r.Limit.Algorithm.Features().MaxDelay {
		return 0
	}
	return r.Limit.MaxDelay
}

// MaxBan bounds a zone's ban: as long as the longest window.
const (
	MinBan = time.Second
	MaxBan = MaxWindow
)

// Decision is one zone's answer to one request.
type Decision struct {
	// Remaining is what the next request could take now.
	Remaining int64
	// RetryAfter is, when this zone denied, the earliest a retry of the same
	// cost can pass here.
	RetryAfter time.Duration
	// ResetAfter is how long until this key's quota is whole again (the
	// admin API's reset_seconds).
	ResetAfter time.Duration
	// MoreAfter is how long until more quota comes back: at least one unit
	// of what is used returns (the headers' t and Reset, but for a zone
	// that denies with nothing remaining: its RetryAfter). 0 when nothing is
	// used. A denied request cannot pass before it, so RetryAfter ≥
	// MoreAfter whenever this zone denies.
	MoreAfter time.Duration
	// At is when the decision was taken, in µs of the store's clock (Redis
	// TIME): a Settlement of this request names it.
	At int64
	// Delay is, when this zone admits with a reservation (max_delay), how
	// long after At the request's turn comes: the handler holds it that
	// long before passing it on. 0 for an admission without one.
	Delay time.Duration
	// Override is, for a request with Overrides, the override its key had
	// in force: the limit it was decided by (ApplyOverrides). Zero when
	// none was. (Two int32 beside the two bools keep a Decision at 64
	// bytes, so a decision allocates no more for it.)
	Override Override
	// Allowed reports whether this zone admits the request. The request is
	// admitted (and consumes quota) only if every zone admits it.
	Allowed bool
	// Banned reports that this zone denied because its key is banned
	// (Request.BanSeconds): RetryAfter is the ban's remaining time.
	// BanStarted reports that this very call set the ban (the trip): one
	// decision in all says so per ban, so an event per ban, not per
	// request. (Two bools more still keep a Decision at 64 bytes.)
	Banned, BanStarted bool
	// Cached marks a decision answered from a DenyCache, without the store.
	Cached bool
	// Leased marks an admission answered from a quota lease (the lease
	// holder, package quota), without the store.
	Leased bool
	// Quota is, for a zone that leases (Request.Quota.For > 0), the lease
	// this decision granted, or the key's units out (QuotaGrant).
	Quota QuotaGrant
}

// Admitted reports whether reqs, decided as ds, are admitted: every zone
// that is not DryRun admits.
func Admitted(reqs []Request, ds []Decision) bool {
	for i, d := range ds {
		if !d.Allowed && !reqs[i].DryRun {
			return false
		}
	}
	return true
}
