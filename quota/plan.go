package quota

import (
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// Planning a request's asks, over one take's scratch space (taking): each
// zone's demand recorded (demand.go), its key tracked once seen enough
// (seen.go), and the units a renewal or the store call asks.

// plan records each request's demand (tracking its key once it has been
// seen enough: quotaShard.seenEnough) and appends each zone's ask to
// asks: what the demand needs in a lease's life (a firstLeaseShare of it
// for this instance's first lease of the key) less the units left and
// those asked by this instance's grants in flight (quotaKey.inFlight), at
// least 2 and the request's cost. Admitted, the asks are a renewal's,
// and renew reports one due. When any zone is cold (its demand would not
// use a lease), or, when the asks would be sent, some zone's store could
// not grant one worth having (worthAsking), none asks: admitted, it
// returns nil asks (no renewal); else askNone or askUntracked per zone.
// dropped are the leases of keys untracked to make room.
func (q *Leases) plan(now time.Time, reqs []algorithms.Request, t taking, admitted bool, asks []int64) (_ []int64, renew bool, dropped []*quotaLease) {
	cold, added := false, false
	for i := range reqs {
		r, k, sh := &reqs[i], t.keys[i], &q.shards[q.shardIn(t.hs[i])]
		if added { // not admitted: an add may have moved or reused the slot found above
			k = sh.find(r.Key)
		}
		span := demandSpan(r.Quota.For)
		if k == nil { // not admitted: no lease was found
			if !sh.seenEnough(t.hs[i], q.sinceStart(now), r.Cost, span) {
				cold = true
				continue
			}
			k, dropped = sh.add(r.Key, dropped)
			t.keys[i], added = k, true
		}
		life := leaseLife(r)
		k.demand.roll(now, span)
		ask := k.demand.ask(now, span, life)
		k.demand.cur += r.Cost
		left, last := k.standing(now, r)
		if admitted {
			t.left[i] = left
			renew = renew || q.due(now, k, r, left, last, renewHorizon(time.Duration(q.rtt.Load()), life))
		}
		if ask == 0 {
			cold = true
			continue
		}
		if k.latest == nil {
			ask /= firstLeaseShare
		}
		asks = append(asks, max(2, r.Cost, ask-left-k.inFlight)) // what the units left and the asks in flight lack, but a lease that serves
	}
	if !cold && (renew || !admitted) { // the asks are sent: only leases worth having
		for i := range reqs {
			cold = cold || !q.worthAsking(&reqs[i])
		}
	}
	switch {
	case cold && admitted:
		return nil, false, dropped
	case cold: // none asks; a key this instance does not track, or cannot lease, is decided as without leases
		asks = asks[:0]
		for i := range reqs {
			a := askNone
			if t.keys[i] == nil || !q.worthAsking(&reqs[i]) {
				a = askUntracked
			}
			asks = append(asks, a)
		}
	}
	return asks, renew, dropped
}

// firstLeaseShare divides the ask of this instance's first lease of a
// key. Instances that decided the key in the store before it had lease
// bookkeeping left no record there, so a key's first grant counts no
// takers beside its holder, and the holder's r would not allow for what
// they take (leasedRemaining). A small first lease is renewed soon, and
// that grant counts them.
const firstLeaseShare = 4

// taking is one take's scratch space: per request its key's hash, key
// (nil: untracked), the lease it took from and its key's units left, and
// the shards locked.
type taking struct {
	hs   []uint64
	idx  []int
	keys []*quotaKey
	from []*quotaLease
	left []int64
}

// takingBuf holds a taking's space on the stack for up to maxStackZones
// zones.
type takingBuf struct {
	hs   [maxStackZones]uint64
	idx  [maxStackZones]int
	keys [maxStackZones]*quotaKey
	from [maxStackZones]*quotaLease
	left [maxStackZones]int64
}

// taking is an empty taking for n zones, in b when they fit.
func (b *takingBuf) taking(n int) taking {
	if n > maxStackZones {
		return taking{hs: make([]uint64, 0, n), idx: make([]int, 0, n), keys: make([]*quotaKey, 0, n),
			from: make([]*quotaLease, 0, n), left: make([]int64, n)}
	}
	return taking{hs: b.hs[:0], idx: b.idx[:0], keys: b.keys[:0], from: b.from[:0], left: b.left[:n]}
}
