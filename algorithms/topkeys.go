package algorithms

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"time"
)

// DefaultTopKeys is how many keys a TopKeys sketch tracks. The admin API
// shows a zone's top 10 (at most 100), and Space-Saving keeps every key
// that took more than 1/DefaultTopKeys of the denials (0.4%): an abuser
// worth listing is far above that. 256 entries hold some 30 KB with
// their keys (store-key hashes), and a
// heap of 256 is 8 levels deep, so an increment that reorders the heap
// does at most 8 swaps.
const DefaultTopKeys = 256

// Counted is a key and its count in a sketch. The key's true count lies
// between Count-Err and Count: Count is exact (Err 0) for a key tracked
// since the sketch was last reset, and Err is the count the key inherited
// when it took the place of the least counted key.
type Counted struct {
	Key   string
	Count uint64
	Err   uint64
}

// TopKeys counts the keys of a stream in bounded memory with the
// Space-Saving algorithm (Metwally, Agrawal and El Abbadi, "Efficient
// Computation of Frequent and Top-k Elements in Data Streams", 2005): it
// tracks at most a fixed number of keys, and a key it does not track takes
// the place of the least counted one, inheriting its count. Thus, after a
// stream of total weight N into a sketch of capacity k:
//
//   - every key with a true count above N/k is tracked;
//   - a tracked key's Count over-estimates its true count by at most its
//     Err, which is at most the least Count in the sketch, at most N/k;
//   - while no more than k distinct keys were added, every count is exact.
//
// A zone counts its denials in one, keyed by the zone's store key (a hash:
// the caller decides what the key is), for the admin API's top offenders.
// On Redis, an instance drains its sketch every few seconds into Redis,
// where the entries expire after the window the endpoint shows (5
// minutes): e.g. ZINCRBY into one sorted set per zone and minute, which
// expires 6 minutes after its minute began, and the endpoint sums the
// sets of the current minute and the 5 before it (ZUNION), as TopWindow
// sums its slots. On the embedded store, a TopWindow keeps the last 5
// minutes locally.
//
// The keys sit in a min-heap by count, with an index from key to entry.
// Adding to a tracked key increments it and sifts it down the heap:
// O(log k) with k = DefaultTopKeys, and no allocation. A stream-summary
// (buckets of equal counts) would be O(1) for increments of 1, but an
// increment of n must walk the buckets; with 8 levels at most, the heap
// is as fast and simpler (see BenchmarkTopKeys). A key taking the least
// one's place costs one map delete and insert.
//
// A TopKeys is safe for concurrent use: every method takes its mutex for
// constant work (Add) or for a copy of at most k entries (Top, Drain).
// The zero value is not usable; make one with NewTopKeys.
type TopKeys struct {
	mu sync.Mutex
	s  spaceSaving
}

// NewTopKeys returns an empty sketch that tracks at most capacity keys
// (DefaultTopKeys when capacity < 1).
func NewTopKeys(capacity int) *TopKeys {
	t := &TopKeys{}
	t.s.init(capacity)
	return t
}

// Add counts n more for key. A key already tracked costs no allocation.
func (t *TopKeys) Add(key string, n uint64) {
	t.mu.Lock()
	t.s.add(key, n)
	t.mu.Unlock()
}

// Top returns at most n of the most counted keys, by Count descending and,
// among equal counts, by key ascending. n < 1 means all of them.
func (t *TopKeys) Top(n int) []Counted {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.s.top(n)
}

// Drain returns every tracked key as Top does, and resets the sketch, in
// one step: a count is returned by exactly one Drain. It is what the
// periodic flush to Redis takes.
func (t *TopKeys) Drain() []Counted {
	t.mu.Lock()
	defer t.mu.Unlock()
	all := t.s.top(0)
	t.s.reset()
	return all
}

// Len returns how many keys the sketch tracks.
func (t *TopKeys) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.s.heap)
}

// spaceSaving is the sketch without its lock: every method requires that
// the caller holds the lock of the TopKeys or TopWindow that owns it.
type spaceSaving struct {
	entries []topEntry           // backing store; never grows past its capacity, so pointers into it stay valid
	heap    []*topEntry          // a min-heap by count
	index   map[string]*topEntry // key → its entry
}

// topEntry is one tracked key; pos is its place in the heap.
type topEntry struct {
	key   string
	count uint64
	err   uint64
	pos   int
}

func (s *spaceSaving) init(capacity int) {
	if capacity < 1 {
		capacity = DefaultTopKeys
	}
	s.entries = make([]topEntry, 0, capacity)
	s.heap = make([]*topEntry, 0, capacity)
	s.index = make(map[string]*topEntry, capacity)
}

// add counts n more for key: a tracked key is incremented; a new key is
// appended while there is room, else it takes the least counted entry's
// place with that entry's count as its error.
func (s *spaceSaving) add(key string, n uint64) {
	if e, ok := s.index[key]; ok {
		e.count = addSat(e.count, n)
		s.down(e.pos)
		return
	}
	if len(s.entries) < cap(s.entries) {
		s.entries = append(s.entries, topEntry{key: key, count: n, pos: len(s.heap)})
		e := &s.entries[len(s.entries)-1]
		s.heap = append(s.heap, e)
		s.index[key] = e
		s.up(e.pos)
		return
	}
	e := s.heap[0]
	delete(s.index, e.key)
	e.key, e.err, e.count = key, e.count, addSat(e.count, n)
	s.index[key] = e
	s.down(0)
}

// up moves the entry at i towards the root while it counts less than its
// parent.
func (s *spaceSaving) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if s.heap[parent].count <= s.heap[i].count {
			return
		}
		s.swap(i, parent)
		i = parent
	}
}

// down moves the entry at i towards the leaves while a child counts less.
func (s *spaceSaving) down(i int) {
	for {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(s.heap) && s.heap[l].count < s.heap[least].count {
			least = l
		}
		if r < len(s.heap) && s.heap[r].count < s.heap[least].count {
			least = r
		}
		if least == i {
			return
		}
		s.swap(i, least)
		i = least
	}
}

func (s *spaceSaving) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.heap[i].pos, s.heap[j].pos = i, j
}

// top copies the entries, sorted as Top says, and keeps the first n (all
// when n < 1).
func (s *spaceSaving) top(n int) []Counted {
	out := make([]Counted, len(s.heap))
	for i, e := range s.heap {
		out[i] = Counted{Key: e.key, Count: e.count, Err: e.err}
	}
	return firstCounted(out, n)
}

// reset forgets every key, keeping the memory (no allocation).
func (s *spaceSaving) reset() {
	clear(s.entries) // drop the key strings for the collector
	s.entries, s.heap = s.entries[:0], s.heap[:0]
	clear(s.index)
}

// firstCounted sorts cs by Count descending, then by Key ascending, and
// keeps the first n (all when n < 1).
func firstCounted(cs []Counted, n int) []Counted {
	slices.SortFunc(cs, func(a, b Counted) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	if n > 0 && n < len(cs) {
		cs = cs[:n:n]
	}
	return cs
}

// Guaranteed returns at most n of cs (all when n < 1) by the count each
// key surely had, Count − Err, the least its true count can be: with Err
// 0, sorted as TopKeys.Top, and without the keys whose guaranteed count is
// 0. It is what an operator is shown: a key that took the place of the
// least counted one inherited that count, which says nothing of it (under
// a flood of distinct keys, a one-shot key would show as many denials as
// the least counted key had), so an inherited count is never reported as
// its own. A key's guaranteed count is at most its true count, and less
// by at most the least count in the sketch.
func Guaranteed(n int, cs []Counted) []Counted {
	out := make([]Counted, 0, len(cs))
	for _, c := range cs {
		if c.Count > c.Err {
			out = append(out, Counted{Key: c.Key, Count: c.Count - c.Err})
		}
	}
	return firstCounted(out, n)
}

// countedSums sums counted keys by key, Count and Err each.
type countedSums map[string]Counted

func (s countedSums) add(key string, count, err uint64) {
	c := s[key]
	c.Key, c.Count, c.Err = key, addSat(c.Count, count), addSat(c.Err, err)
	s[key] = c
}

// first is firstCounted of the sums.
func (s countedSums) first(n int) []Counted {
	out := make([]Counted, 0, len(s))
	for _, c := range s {
		out = append(out, c)
	}
	return firstCounted(out, n)
}

// addSat returns a+b, or the largest uint64 when that overflows.
func addSat(a, b uint64) uint64 {
	if a+b < a {
		return math.MaxUint64
	}
	return a + b
}

// Top window defaults: the admin API's top offenders cover the last 5
// minutes, in slots of a minute.
const (
	DefaultTopSpan  = 5 * time.Minute
	DefaultTopSlots = 5
)

// TopWindow counts keys over a sliding span of time, for a store that
// answers top offenders locally (the embedded store): a ring of
// Space-Saving sketches, one per slot of span/slots, plus one for the slot
// in progress. TopAt merges the slots that have not left the span, so it
// covers at least the last span and at most span + span/slots (with the
// defaults, 5 to 6 minutes); a slot is reused, without allocation, when
// its time comes round again.
//
// Time is a parameter (AddAt, TopAt). A time earlier than the one its
// slot of the ring last counted (a clock stepped back) is counted in that
// slot as it stands: never lost, at worst credited to a later interval.
//
// A TopWindow is safe for concurrent use: its mutex guards the ring, and
// every method holds it. The zero value is not usable; make one with
// NewTopWindow.
type TopWindow struct {
	mu       sync.Mutex
	interval time.Duration
	slots    []topSlot // slots+1 sketches, by epoch modulo their number
}

// topSlot is one interval's sketch; epoch is the interval it counts (the
// time in Unix nanoseconds divided by the interval), unusedSlot before the
// first count.
type topSlot struct {
	epoch int64
	s     spaceSaving
}

// unusedSlot is the epoch of a slot that never counted.
const unusedSlot = math.MinInt64

// NewTopWindow returns a window of span cut into slots, each slot a sketch
// of capacity keys. span < 1 means DefaultTopSpan, slots < 1
// DefaultTopSlots, capacity < 1 DefaultTopKeys.
func NewTopWindow(span time.Duration, slots, capacity int) *TopWindow {
	if span <= 0 {
		span = DefaultTopSpan
	}
	if slots < 1 {
		slots = DefaultTopSlots
	}
	w := &TopWindow{interval: max(span/time.Duration(slots), 1), slots: make([]topSlot, slots+1)}
	for i := range w.slots {
		w.slots[i].epoch = unusedSlot
		w.slots[i].s.init(capacity)
	}
	return w
}

// Add counts n more for key now.
func (w *TopWindow) Add(key string, n uint64) { w.AddAt(time.Now(), key, n) }

// AddAt counts n more for key at now. A key already tracked in now's slot
// costs no allocation.
func (w *TopWindow) AddAt(now time.Time, key string, n uint64) {
	epoch := now.UnixNano() / int64(w.interval)
	w.mu.Lock()
	slot := &w.slots[mod(epoch, len(w.slots))]
	if epoch > slot.epoch {
		slot.s.reset()
		slot.epoch = epoch
	}
	slot.s.add(key, n)
	w.mu.Unlock()
}

// TopAt returns at most n of the most counted keys in the span up to now,
// sorted as TopKeys.Top. Each key's Count and Err are its sums over the
// slots that track it; a slot that does not track it may have seen it up
// to that slot's least count.
func (w *TopWindow) TopAt(now time.Time, n int) []Counted {
	epoch := now.UnixNano() / int64(w.interval)
	w.mu.Lock()
	sums := make(countedSums)
	for i := range w.slots {
		slot := &w.slots[i]
		if slot.epoch == unusedSlot {
			continue
		}
		if age := epoch - slot.epoch; age < 0 || age >= int64(len(w.slots)) {
			continue // not yet or no longer in the span
		}
		for _, e := range slot.s.heap {
			sums.add(e.key, e.count, e.err)
		}
	}
	w.mu.Unlock()
	return sums.first(n)
}

// mod is a modulo that is never negative (times before 1970).
func mod(a int64, n int) int {
	m := a % int64(n)
	if m < 0 {
		m += int64(n)
	}
	return int(m)
}

// MergeCounted sums lists of counted keys by key (Count and Err each) and
// returns at most n of them (all when n < 1), sorted as TopKeys.Top: how
// the admin API adds an instance's counts not yet flushed to Redis's.
func MergeCounted(n int, lists ...[]Counted) []Counted {
	sums := make(countedSums)
	for _, list := range lists {
		for _, c := range list {
			sums.add(c.Key, c.Count, c.Err)
		}
	}
	return sums.first(n)
}
