package algorithms

import "time"

// Concurrency limits requests in flight: at most Events leases per key at
// once. A lease is taken when a request is admitted, renewed while its
// request runs (a Renewal, Delta RenewLease) and given back by a
// Settlement with its Lease when the response is done; a lease that is
// neither renewed nor given back (its Caddy died) expires Window after it
// was taken or last renewed.
const Concurrency Algorithm = "concurrency"

// DefaultConcurrencyWindow is how long a lease lives if it is never given
// back, when a concurrency zone sets no window: long enough for any
// ordinary response, short enough that a crashed instance's slots come
// back within a minute.
const DefaultConcurrencyWindow = time.Minute

// RenewLease is a concurrency Settlement's Delta that renews its lease
// instead of giving it back: a lease still held then lives Window from
// now; a lease given back or expired stays so (a renewal never takes a
// slot).
const RenewLease = 1

// Renewal is the settlement that renews r's lease (r is a Concurrency
// zone's admitted request).
func Renewal(r Request) Settlement {
	return Settlement{Key: r.Key, Limit: r.Limit, Lease: r.Lease, Delta: RenewLease}
}

// concurrencyWait is the Retry-After (and t) of a full concurrency zone: a
// slot comes back whenever a response ends, which no store can foresee, so
// the client is asked to retry in a second (or the window, if shorter).
const concurrencyWait = int64(time.Second / time.Microsecond)

// concurrency mirrors luascripts/concurrency.lua. Each request takes one
// lease whatever its cost; the store adds the lease itself on commit
// (takeLease), as the decide functions know no lease ids. It counts the
// live leases in place, allocating nothing: O(leases held), at most events
// (and the tombstones of leases given back early, see concurrencySettle).
// s.leases maps a lease to its expiry (µs), or a tombstone to minus its.
func concurrency(s state, in input) verdict {
	now, events, window := in.now, in.events, in.window
	var used int64
	for _, expiry := range s.leases {
		if expiry > now {
			used++
		}
	}
	wait := min(window, concurrencyWait)
	v := verdict{remaining: events - used} // reset and more alike: nothing foretells a slot's return
	if used >= events {
		v.reset, v.more = wait, wait
	}
	if used+1 > events {
		v.retry = wait
		return v
	}
	v.allowed = true
	if used+1 >= events {
		v.resetAfter, v.moreAfter = wait, wait
	}
	v.next = state{leases: s.leases, expires: max(s.expires, now+window)}
	return v
}

// takeLease is next with r's lease added and the expired leases and
// tombstones dropped, in place, for a concurrency zone's admitted request
// about to be stored; the shard's lock is held. A lease with a tombstone
// (given back before it was taken) is not taken. Other requests' states
// are returned as they are.
func takeLease(next state, r Request, now int64) state {
	if r.Limit.Algorithm != Concurrency || r.Lease == "" {
		return next
	}
	if next.leases == nil {
		next.leases = make(map[string]int64, 1)
	}
	for id, expiry := range next.leases {
		if expiry <= now && -expiry <= now {
			delete(next.leases, id)
		}
	}
	if _, released := next.leases[r.Lease]; !released {
		next.leases[r.Lease] = now + r.Limit.Window.Microseconds()
	}
	return next
}

// concurrencySettle renews a lease still held (delta RenewLease) or gives
// it back. A lease given back that is not held may be on its way: the
// call that takes it timed out for its caller but may still reach the
// store after this one (on Redis, through another connection). A
// tombstone, minus the expiry such a lease could have, keeps it from
// being taken; it counts for nothing and ends when that lease would have.
// The shard's lock is held; s.leases is changed in place.
func concurrencySettle(s state, in settleInput) (state, bool) {
	now, window, delta, lease := in.now, in.window, in.delta, in.lease
	expiry, ok := s.leases[lease]
	switch {
	case delta > 0: // renew
		if !ok || expiry <= now {
			return s, false
		}
		s.leases[lease] = now + window
	case ok && expiry > 0:
		delete(s.leases, lease)
		return s, true
	case ok: // a tombstone already
		return s, false
	default:
		if s.leases == nil {
			s.leases = make(map[string]int64, 1)
		}
		s.leases[lease] = -(now + window)
	}
	s.expires = max(s.expires, now+window)
	return s, true
}
