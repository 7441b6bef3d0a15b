package algorithms

import (
	"context"
	"time"
)

// Store is what every store does, and every wrapper of a store (the deny
// cache, the circuit breaker) does by passing on to the store it wraps: it
// decides requests, reads and resets keys for operators, settles admitted
// requests after their responses, and holds keys' overrides. The handler
// and the admin API use nothing else of a store; what only some stores
// can do is asked of them once, when a handler is provisioned, through
// the optional interfaces below.
//
// Implementations MUST be safe for concurrent use: every method may run
// alongside every other, on the same keys.
type Store interface {
	// Allow decides reqs atomically: the request is admitted when every
	// zone that is not DryRun admits; then every zone that admits
	// consumes, and when it is not, nothing is consumed anywhere.
	// Implementations MUST answer a cost above a zone's capacity without
	// touching state (OverCapacityAt), and MUST return one Decision per
	// request, in order, unless they return an error.
	Allow(ctx context.Context, reqs []Request) ([]Decision, error)

	// Peek decides reqs as Allow would, consuming nothing: the admin API's
	// look at a key.
	Peek(ctx context.Context, reqs []Request) ([]Decision, error)

	// Reset deletes key's state and lifts its ban, so that it starts over
	// with its whole quota; its override stays. A store shared by several
	// instances tells them, so that they drop their cached denials of key;
	// a reset done but not told is an *UnannouncedError.
	Reset(ctx context.Context, key string) error

	// Settle applies each settlement on its own (they need not be atomic
	// together); a settlement whose window has passed changes nothing,
	// except on a token bucket, whose debt is charged whenever it arrives.
	// Implementations MUST NOT replay a settlement that may have been
	// applied: a refund or a debt applied twice is quota lost or given
	// away.
	Settle(ctx context.Context, ss []Settlement) error

	// SetOverride sets key's override: TTL 0 keeps it until it is cleared;
	// a positive TTL ends it after that long, on the store's clock. The
	// next decision of key with Overrides decides by it.
	SetOverride(ctx context.Context, key string, o Override, ttl time.Duration) error

	// ClearOverride deletes key's override.
	ClearOverride(ctx context.Context, key string) error
}

// TopSharer is a store that keeps zones' top offenders for every instance
// sharing it: each instance adds the denials it counted (AddTop), and the
// admin API reads their sum (ReadTop). A store without it (the memory
// store) has only its own instance's counts, which the handler keeps.
// Counts are by minute of now; prefix is the zone's key prefix in the
// store. Implementations MUST be safe for concurrent use.
type TopSharer interface {
	AddTop(ctx context.Context, prefix, zone string, now time.Time, counts []Counted) error
	ReadTop(ctx context.Context, prefix, zone string, now time.Time) ([]Counted, error)
}

// QuotaLender is a store that grants quota leases (a Request's Quota ask,
// answered in its Decision's Quota) and takes their unused units back:
// a store shared by instances, each holding leases of it (package quota)
// and giving them back to it.
type QuotaLender interface {
	Store
	// GiveBack applies each give-back on its own, where its grant still
	// takes it (GiveBack says when). Implementations MUST NOT replay one
	// that may have been applied, as Settle.
	GiveBack(ctx context.Context, gbs []GiveBack) error
}

// GiveBackReporter is a store that says, of each quota lease give-back
// it is sent, whether it took it (the units went back) or refused it
// (the key's generation moved on, the give-back came too late, or was
// sent twice): the quota lease holder (package quota) counts the units
// it returned or saw refused by it (Leases.GiveBacksReportedBy). report must be quick and must not call back.
type GiveBackReporter interface {
	ReportGiveBacks(report func(key string, units int64, taken bool))
}

// ServerDescriber is a store on a server that can say what it is, for the
// logs and the admin API's zone listing. DescribeServer also readies the
// server for decisions (loads the decide code), so it is what a handler
// calls at start to connect.
type ServerDescriber interface {
	DescribeServer(ctx context.Context) (ServerDescription, error)
}

// ServerDescription is what answers a store: its server's name and
// version (e.g. "valkey 8.1.1"), and whether decisions run as a server
// function (else as a script sent by hash).
type ServerDescription struct {
	Server    string
	Functions bool
}

// ResetSubscriber is a store shared by several instances, each with its
// own deny cache: an instance's Reset tells the others, and
// SubscribeResets hears what they tell, calling forget with each key
// reset anywhere. failed is called with each failure of the subscription
// and the time until its next try, up once it works (again).
type ResetSubscriber interface {
	SubscribeResets(forget func(key string), failed func(err error, retry time.Duration), up func()) Subscription
}

// Subscription is a running subscription: Live reports whether it hears
// what is told now; Stop ends it.
type Subscription interface {
	Live() bool
	Stop()
}
