package algorithms

import "time"

// GiveBack returns a quota lease's unused units to the store that granted
// the lease (a QuotaLender). The store applies it only if the key's
// generation is still the grant's, before the grant's end plus the zone's
// quota_lease (and for token_bucket, before its end and with no later
// grant), and only once: a give-back sent twice does nothing, while a
// holder's give-backs of different grants land in any order. Holders
// never retry one.
type GiveBack struct {
	// Key is the zone's key; Limit the limit the grant was decided by
	// (its override's, if one was in force).
	Key   string
	Limit Limit
	// At is the grant's Decision's At (µs): its units are refunded as
	// taken then (token_bucket's, at the grant's end).
	At int64
	// Units are the lease's unused units, which go back.
	Units int64
	// Grant is the grant given back; LeaseFor the zone's quota_lease,
	// Holder the instance that held it.
	Grant    QuotaGrant
	LeaseFor time.Duration
	Holder   string
}

// GiveBackOf is the give-back of `unused` units of the grant d made to r.
func GiveBackOf(r Request, d Decision, unused int64) GiveBack {
	return GiveBack{Key: r.Key, Limit: d.Override.Apply(r.Limit), At: d.At, Units: unused, Grant: d.Quota, LeaseFor: r.Quota.For, Holder: r.Quota.Holder}
}

// refund is the settlement g makes of its key's state: its units given
// back as of At.
func (g GiveBack) refund() Settlement {
	return Settlement{Key: g.Key, Limit: g.Limit, At: g.At, Delta: -g.Units}
}
