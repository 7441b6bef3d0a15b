package quota

import "time"

// Which keys a holder tracks: a key gets a slot (table.go) only once it
// has been seen for enough units within a span, which a record of small
// entries per shard counts for the keys not tracked.

// seenEnough reports whether a key of hash h, not tracked, has been
// seen for at least quotaTrackUnits units within span (since a first
// sighting at most span before now, µs since its holder was made),
// counting this sighting of cost units. A shard tracks a key (gives it a
// slot, and counts its demand there) only from then: a key seen rarely,
// as each of many cold keys is (and each of a flood of made-up keys),
// costs an entry of seen instead of a slot, and seldom evicts a key in
// use. An entry holds a fingerprint (h's top 24 bits), the units counted
// (to 255) and the first sighting's time. Another key's entry is taken
// over only once older than span or counting no more units than this
// sighting, so a key warming up keeps its count against a stream of cold
// ones; an entry that another key matches by chance hastens a tracking.
func (sh *quotaShard) seenEnough(h uint64, now uint32, cost int64, span time.Duration) bool {
	e := &sh.seen[uint32(h>>8)&uint32(len(sh.seen)-1)] // above the shard's bits
	fp, units, first := h>>40, uint64(min(max(cost, 0), 255)), now
	recent, counted := time.Duration(now-uint32(*e))*time.Microsecond <= span, (*e>>32)&0xff
	switch {
	case *e>>40 == fp && recent:
		units, first = min(units+counted, 255), uint32(*e)
	case recent && counted > units: // another key's, warmer: kept
		return units >= quotaTrackUnits
	}
	*e = fp<<40 | units<<32 | uint64(first)
	return units >= quotaTrackUnits
}

// quotaTrackUnits is the least demand within a span that can ask for a
// lease (demand.ask: 2 units a lease, a span being two).
const quotaTrackUnits = 4

// seenEntries is the size of a shard's seen record for a shard of keys
// slots: half as many, a power of two, at least 64 (8 bytes each).
func seenEntries(keys int) int {
	n := 64
	for n*2 <= keys/2 {
		n *= 2
	}
	return n
}
