package algorithms

import "time"

// Quota leases (docs/algorithms.md, "Quota leases"): when
// the store admits a request of a hot key with quota to spare, the same
// atomic call may count extra units for the asking instance, which then
// admits its next requests of that key in process (package quota) until
// the lease is spent or ends. Leased units are counted in the store
// before anyone uses them, each as if used at any moment from its grant
// to its lease's end, so the fleet never admits more than the algorithm
// allows:
//
//   - fixed_window (and periods): the units count in the window of the
//     grant, and the lease ends no later than that window;
//   - sliding_window: they count in the slot of the grant, and the lease
//     ends no later than that slot;
//   - sliding_log: their entry is stamped with the lease's end, and
//     counts from the grant (in the log's total) until end + window;
//   - token_bucket: the grant needs the units available now, and the
//     bucket is written as if they were taken at the lease's end, so
//     until then it behaves as one of capacity burst − units.
//
// The store keeps per key, beside its state (QuotaKey), the lease
// bookkeeping: the key's generation (raised by a reset or an override,
// so that no give-back from before it lands after it), the units in
// leases not yet ended, the latest lease end, the limit the leases were
// granted under, a grant counter and the instances that recently held a
// lease.

// MaxQuotaLease bounds a zone's quota_lease: the longest an instance uses
// quota it leased. DefaultQuotaLease is a zone's on Redis when it sets
// none.
const (
	MinQuotaLease     = time.Millisecond
	MaxQuotaLease     = 10 * time.Second
	DefaultQuotaLease = 250 * time.Millisecond
)

// QuotaGiveBackGrace is how long past its lease's end plus quota_lease a
// give-back still lands (but a token_bucket's, taken only before its
// lease's end): one sent late by a busy instance (a reload's, a sweep's
// behind others) then returns its units instead of leaving them counted
// until the window ends.
const QuotaGiveBackGrace = time.Second

// QuotaAsk is a request's ask for a quota lease in one zone.
type QuotaAsk struct {
	// For is the zone's quota_lease: the longest a lease of it lasts. 0:
	// the zone does not lease (the store reads no lease bookkeeping).
	For time.Duration
	// Units is how many units to lease beyond the request's Cost: the
	// store grants them only if the request is admitted and every zone
	// of the request that leases gets its lease (all or nothing), never
	// more than (remaining after the request) / (2 × the instances that
	// recently held a lease on the key), and none under 2. 0: no lease
	// asked now (the zone still reports its units out).
	Units int64
	// Min is the shortest lease worth having (two round trips, once the
	// holder's margins are off): the store grants none that would end
	// sooner.
	Min time.Duration
	// Holder names the asking instance, so the store counts the instances
	// that recently held leases on the key.
	Holder string
	// Untracked: the holder does not track the key (seen too seldom to
	// lease, or its zone can lease nothing worth having), and asks
	// nothing: the store decides it as without leases and reads no lease
	// bookkeeping, so a cold key costs what it costs with quota_lease off.
	Untracked bool
}

// QuotaGrant is a lease the store granted, or for a zone that leases and
// got none, what it has out.
type QuotaGrant struct {
	// Units is the units granted beyond the request's cost (0: none). In
	// a look (Peek) or a request without a grant: 0, and Out says what is
	// out.
	Units int64
	// End is when the lease ends, in µs of the store's clock (Decision.At
	// is the grant's time); without a grant, the latest end of the key's
	// leases when units are out (a cached denial lasts no longer), else 0.
	End int64
	// Generation is the key's generation at the grant: a give-back names
	// it and does nothing once a reset or an override raised it.
	Generation int64
	// ID is the grant's number among the key's grants: a token_bucket
	// give-back does nothing once a later grant was made.
	ID int64
	// Out is the units in the key's leases not yet ended, used or not,
	// this grant's included (the admin API's "leased").
	Out int64
	// Takers is how many instances recently took from the key, the asker
	// included: those holding leases and those deciding it in the store
	// (0: the key has no lease bookkeeping). With others, a leased
	// answer's r allows for what they take meanwhile (package quota).
	Takers int64
}
