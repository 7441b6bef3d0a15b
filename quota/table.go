package quota

import (
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// The key table: keys spread over shards by a hash, each shard a lock, a
// map of its keys to their slots and the slots, reused in the order of a
// clock hand once full; a slot is a key's demand and its leases.

// keyTable is a holder's keys, in shards (a power of two of them): a
// key's shard is found by a maphash of the key, seeded per holder.
type keyTable struct {
	seed   maphash.Seed
	shards []quotaShard
}

func (t *keyTable) shardOf(key string) int { return t.shardIn(t.hash(key)) }

func (t *keyTable) hash(key string) uint64 { return maphash.String(t.seed, key) }

// shardIn is the shard of a key of hash h (its low bits; quotaShard.seen
// reads higher ones).
func (t *keyTable) shardIn(h uint64) int { return int(h & uint64(len(t.shards)-1)) }

// lock locks the distinct shards of reqs' keys in index order, appending
// each request's key's hash to hs and the shards locked to idx.
func (t *keyTable) lock(reqs []algorithms.Request, hs []uint64, idx []int) ([]uint64, []int) {
	for i := range reqs {
		h := t.hash(reqs[i].Key)
		hs = append(hs, h)
		if s := t.shardIn(h); !slices.Contains(idx, s) {
			idx = append(idx, s)
		}
	}
	slices.Sort(idx)
	for _, s := range idx {
		t.shards[s].mu.Lock()
	}
	return hs, idx
}

func (t *keyTable) unlock(idx []int) {
	for _, s := range idx {
		t.shards[s].mu.Unlock()
	}
}

// maxQuotaShards bounds the shards; quotaShardMin is the fewest keys a
// shard is given.
const (
	maxQuotaShards = 64
	quotaShardMin  = 1024
)

// quotaShard is one lock's share of a holder: a map of its keys to
// their slots, at most cap(slots) of them, reused in the order of a clock
// hand (quotaKeyTries), and the slots that hold leases, which the sweep
// walks.
type quotaShard struct {
	mu     sync.Mutex
	resets atomic.Uint64 // Forget calls of its keys: a grant asked before one is not held
	index  map[string]int32
	slots  []quotaKey
	size   int
	hand   int
	held   []int32
	seen   []uint64 // units seen of keys not tracked (seenEnough)
	_      [64]byte
}

// quotaKey is what a holder holds of one key: its demand, and its
// leases, earliest ending first (a spent lease leaves the list).
type quotaKey struct {
	key    string
	demand demand
	leases []*quotaLease
	latest *quotaLease // the latest grant held, spent or not: its Remaining is the store's latest word
	taken  int64       // units taken from the key's leases since latest was held
	// shown is the least r answered for the key in the fixed window
	// ending at shownUntil (µs of the store's clock): steady
	shown, shownUntil int64
	renewing          bool // a renewal of a request with this key is in flight
	// inFlight is the units asked by this instance's grants of the key
	// not yet answered (a renewal's, or the store calls of requests its
	// leases could not admit): a concurrent ask lacks only what they and
	// the units left do not cover. Without it, each request arriving
	// while a grant is in flight (32 connections whose lease ran out)
	// asked for a whole lease of its own.
	inFlight int64
	touched  bool  // used since the eviction hand passed
	heldAt   int32 // index in the shard's held, -1 when it holds no lease
}

// quotaKeyTries is how many slots an insertion into a full shard looks at
// for one to reuse: a slot used since the hand last passed it, or holding
// leases, gets a second chance, up to the last try, which takes its slot
// whatever it holds. A constant, so an insertion does bounded work.
const quotaKeyTries = 4

// find is key's slot, or nil.
func (sh *quotaShard) find(key string) *quotaKey {
	i, ok := sh.index[key]
	if !ok {
		return nil
	}
	k := &sh.slots[i]
	k.touched = true
	return k
}

// findOrAdd is key's slot, a new one if it has none (add).
func (sh *quotaShard) findOrAdd(key string, dropped []*quotaLease) (*quotaKey, []*quotaLease) {
	if k := sh.find(key); k != nil {
		return k, dropped
	}
	return sh.add(key, dropped)
}

// add is a new slot for key, which has none. When the shard is full, the
// slot it reuses drops its key: its leases, if any, are appended to
// dropped (to give back).
func (sh *quotaShard) add(key string, dropped []*quotaLease) (*quotaKey, []*quotaLease) {
	var i int
	if len(sh.slots) < sh.size {
		sh.slots = append(sh.slots, quotaKey{})
		i = len(sh.slots) - 1
	} else {
		i = sh.victim()
		old := &sh.slots[i]
		dropped = append(dropped, old.leases...)
		sh.setLeases(old, nil)
		old.latest = nil
		delete(sh.index, old.key)
	}
	sh.slots[i] = quotaKey{key: key, touched: true, heldAt: -1}
	sh.index[key] = int32(i)
	return &sh.slots[i], dropped
}

// victim is the slot a full shard reuses (quotaKeyTries).
func (sh *quotaShard) victim() int {
	for try := 1; ; try++ {
		i := sh.hand
		sh.hand = (sh.hand + 1) % len(sh.slots)
		k := &sh.slots[i]
		if try == quotaKeyTries || (!k.touched && len(k.leases) == 0) {
			return i
		}
		k.touched = false
	}
}

// setLeases sets k's leases, keeping the shard's list of slots holding
// leases.
func (sh *quotaShard) setLeases(k *quotaKey, leases []*quotaLease) {
	k.leases = leases
	switch {
	case len(leases) > 0 && k.heldAt < 0:
		k.heldAt = int32(len(sh.held))
		sh.held = append(sh.held, sh.index[k.key])
	case len(leases) == 0 && k.heldAt >= 0:
		last := sh.held[len(sh.held)-1]
		sh.held[k.heldAt] = last
		sh.slots[last].heldAt = k.heldAt
		sh.held = sh.held[:len(sh.held)-1]
		k.heldAt = -1
	}
}

// remove takes lease l out of k's, and reports whether k held it.
func (sh *quotaShard) remove(k *quotaKey, l *quotaLease) bool {
	i := slices.Index(k.leases, l)
	if i < 0 {
		return false
	}
	sh.setLeases(k, slices.Delete(k.leases, i, i+1))
	return true
}

// standing is what k's live leases of r's limit hold at now: their units
// not yet used, and their latest end. A grant asks for what the demand
// needs in a lease's life beyond those units: they are used first (the
// earliest-ending lease serves first), so a renewal sized for a whole
// life would leave what they hold unused at its end (a renewal due an
// eighth of a life early: an eighth of every lease), and a zone beside
// one whose leases are short (a token_bucket's slot) would gather a
// lease's worth at each of that zone's grants.
func (k *quotaKey) standing(now time.Time, r *algorithms.Request) (left int64, last time.Time) {
	for _, l := range k.leases {
		if now.Before(l.end) && l.req.Limit == r.Limit {
			left += l.units - l.used
			if l.end.After(last) {
				last = l.end
			}
		}
	}
	return left, last
}

// quotaLease is one lease of one key.
type quotaLease struct {
	req      algorithms.Request  // the zone's request as sent (Key, Limit, Quota.For)
	grant    algorithms.Decision // the decision that granted it (Quota is the grant)
	units    int64               // granted
	used     int64               // taken by requests
	answered time.Time
	end      time.Time // local: not used from then on
	resets   uint64    // its key's shard's Forget count when it was asked
}

// live reports whether l may serve r at now: before its end, under r's
// limit, with units left for r's cost.
func (l *quotaLease) live(now time.Time, r *algorithms.Request) bool {
	return now.Before(l.end) && l.req.Limit == r.Limit && l.units-l.used >= r.Cost
}
