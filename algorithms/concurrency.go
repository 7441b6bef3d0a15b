package algorithms

import "time"

// Concurrency limits requests in flight: at most Events leases per key at
// once. A lease is taken when a request is admitted and given back by a
// Settlement with its Lease when the response is done; a lease that is
// never given back (its Caddy died) expires after Window.
const Concurrency Algorithm = "concurrency"

// DefaultConcurrencyWindow is how long a lease lives if it is never given
// back, when a concurrency zone sets no window: long enough for any
// ordinary response, short enough that a crashed instance's slots come
// back within a minute.
const DefaultConcurrencyWindow = time.Minute

// concurrencyWait is the Retry-After (and t) of a full concurrency zone: a
// slot comes back whenever a response ends, which no store can foresee, so
// the client is asked to retry in a second (or the window, if shorter).
const concurrencyWait = int64(time.Second / time.Microsecond)

// concurrency mirrors luascripts/concurrency.lua. Each request takes one
// lease whatever its cost; the caller adds the lease itself (withLease),
// as the decide functions know no lease ids. The live leases are copied
// on every decision, so remaining is exact (as ZCOUNT is on Redis) and the
// stored state changes only on commit: O(leases held), at most events.
func concurrency(s state, now, events, window, _, _ int64) verdict {
	live := make(map[string]int64, len(s.leases)+1)
	for id, expiry := range s.leases {
		if expiry > now {
			live[id] = expiry
		}
	}
	used := int64(len(live))
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
	v.next = state{leases: live, expires: max(s.expires, now+window)}
	return v
}

// withLease is v.next with r's lease added, for a concurrency zone that
// admits r; other verdicts are returned as they are.
func withLease(v verdict, r Request, now int64) state {
	if r.Limit.Algorithm != Concurrency || !v.allowed || r.Lease == "" {
		return v.next
	}
	next := v.next
	next.leases[r.Lease] = now + r.Limit.Window.Microseconds()
	return next
}

// concurrencySettle gives the lease back; the delta means nothing here.
func concurrencySettle(s state, _, _, _, _, _, _ int64, lease string) (state, bool) {
	if _, ok := s.leases[lease]; !ok {
		return s, false
	}
	delete(s.leases, lease)
	return s, true
}
