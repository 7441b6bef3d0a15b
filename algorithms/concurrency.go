package algorithms

import "time"

// Concurrency limits requests in flight: at most Events slots per key at
// once. A slot is taken when a request is admitted, renewed while its
// request runs (a Renewal, Delta RenewSlot) and given back by a
// Settlement with its Slot when the response is done; a slot that is
// neither renewed nor given back (its Caddy died) expires Window after it
// was taken or last renewed.
const Concurrency Algorithm = "concurrency"

// DefaultConcurrencyWindow is how long a slot lives if it is never given
// back, when a concurrency zone sets no window: long enough for any
// ordinary response, short enough that a crashed instance's slots come
// back within a minute.
const DefaultConcurrencyWindow = time.Minute

// RenewSlot is a concurrency Settlement's Delta that renews its slot
// instead of giving it back: a slot still held then lives Window from
// now; a slot given back or expired stays so (a renewal never takes a
// slot).
const RenewSlot = 1

// Renewal is the settlement that renews r's slot (r is a Concurrency
// zone's admitted request).
func Renewal(r Request) Settlement {
	return Settlement{Key: r.Key, Limit: r.Limit, Slot: r.Slot, Delta: RenewSlot}
}

// concurrencyWait is the Retry-After (and t) of a full concurrency zone: a
// slot comes back whenever a response ends, which no store can foresee, so
// the client is asked to retry in a second (or the window, if shorter).
const concurrencyWait = int64(time.Second / time.Microsecond)

// concurrency mirrors luascripts/concurrency.lua. Each request takes one
// slot whatever its cost; the store adds the slot itself on commit
// (takeSlot), as the decide functions know no slot ids. It counts the
// live slots in place, allocating nothing: O(slots held), at most events
// (and the tombstones of slots given back early, see concurrencySettle).
// s.slots maps a slot to its expiry (µs), or a tombstone to minus its.
func concurrency(s state, in input) verdict {
	now, events, window := in.now, in.events, in.window
	var used int64
	for _, expiry := range s.slots {
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
	v.next = state{slots: s.slots, expires: max(s.expires, now+window)}
	return v
}

// takeSlot is next with r's slot added and the expired slots and
// tombstones dropped, in place, for a concurrency zone's admitted request
// about to be stored; the shard's lock is held. A slot with a tombstone
// (given back before it was taken) is not taken. Other requests' states
// are returned as they are.
func takeSlot(next state, r Request, now int64) state {
	if r.Limit.Algorithm != Concurrency || r.Slot == "" {
		return next
	}
	if next.slots == nil {
		next.slots = make(map[string]int64, 1)
	}
	for id, expiry := range next.slots {
		if expiry <= now && -expiry <= now {
			delete(next.slots, id)
		}
	}
	if _, released := next.slots[r.Slot]; !released {
		next.slots[r.Slot] = now + r.Limit.Window.Microseconds()
	}
	return next
}

// concurrencySettle renews a slot still held (delta RenewSlot) or gives
// it back. A slot given back that is not held may be on its way: the
// call that takes it timed out for its caller but may still reach the
// store after this one (on Redis, through another connection). A
// tombstone, minus the expiry such a slot could have, keeps it from
// being taken; it counts for nothing and ends when that slot would have.
// The shard's lock is held; s.slots is changed in place.
func concurrencySettle(s state, in settleInput) (state, bool) {
	now, window, delta, slot := in.now, in.window, in.delta, in.slot
	expiry, ok := s.slots[slot]
	switch {
	case delta > 0: // renew
		if !ok || expiry <= now {
			return s, false
		}
		s.slots[slot] = now + window
	case ok && expiry > 0:
		delete(s.slots, slot)
		return s, true
	case ok: // a tombstone already
		return s, false
	default:
		if s.slots == nil {
			s.slots = make(map[string]int64, 1)
		}
		s.slots[slot] = -(now + window)
	}
	s.expires = max(s.expires, now+window)
	return s, true
}
