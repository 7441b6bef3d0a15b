package algorithms

// LeaseBook keeps a memory store's quota lease bookkeeping, key by key:
// the twin of the hash the Lua keeps beside a key's state on Redis (the
// key's generation, its grants and their units out, the instances that
// hold or take). A memory store lends leases only with one
// (NewMemoryStoreLending); the handler asks its embedded store for none,
// so only tests give it one (internal/leasetwin), to check the Lua's
// leases against Go and to run the lease holder (package quota) without
// Redis. Times are µs of the store's clock; the store calls it under the
// locks of the key's shard.
type LeaseBook interface {
	// LeasedLimit is r's limit while its key has units out under a
	// smaller one (one limit per lease); ok is false when r's own applies.
	LeasedLimit(r Request, now int64) (l Limit, ok bool)
	// Sharers are how many instances recently held leases on r's key
	// (holders) and took from it (takers), r's holder included: at
	// least 1 each.
	Sharers(r Request, now int64) (holders, takers int64)
	// Grant records a grant of units to r's holder until end, and
	// returns its generation, its ID and the key's units out.
	Grant(r Request, units, end, now int64) QuotaGrant
	// Report is what a leasing zone's decision of r says without a grant
	// (ok false: the key has no bookkeeping); taken: r took from the key,
	// so its holder counts as a recent taker.
	Report(r Request, now int64, taken bool) (g QuotaGrant, ok bool)
	// Out is the units of key's grants not yet ended.
	Out(key string, now int64) int64
	// GiveBack reports whether g applies at now, and if so counts its
	// units back from the units out.
	GiveBack(g GiveBack, now int64) bool
	// NewGeneration starts a new generation of key's bookkeeping (a reset,
	// ended, or an override): no lease granted before it gives back after
	// it.
	NewGeneration(key string, now int64, ended bool)
}
