package sluice

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// What happens to a request that may wait for its turn (max_delay): it
// takes a place among the waiting when the backend decides it, and keeps
// it until its wait (ServeHTTP's) is over or was never needed.

// maxMaxDelay is the longest max_delay: a waiting request holds its
// client's connection, and a client that waits longer than a minute for a
// response has usually given up (or should be told to come back, with
// Retry-After).
const maxMaxDelay = time.Minute

// defaultMaxWaiting bounds the requests one handler holds for their turn
// (max_delay) at once: 1024. Past it, a request that would have to wait is
// decided as if its wait were longer than max_delay: rejected with
// Retry-After, consuming nothing, while requests that need no wait still
// pass. Each waiting request holds a client connection (a file
// descriptor), a goroutine and a timer, some tens of KB with their
// buffers: 1024 of them cost tens of MB and a thousand descriptors at
// most, however many keys a flood spreads over, and shaping rarely needs
// more (a key has at most events × max_delay / window waiting: 100 at
// 100/s with max_delay 1s).
const defaultMaxWaiting = 1024

// defaultMaxWaitingPerKey bounds the places one key (a zone's store key)
// holds among a handler's waiting at once: 128, an eighth of
// defaultMaxWaiting. Without it, one hot key whose zone lets more wait
// than the handler holds (events × max_delay / window past 1024) would
// take every place, and every other key's requests would be rejected
// while that one flood lasts; with it, one key leaves seven eighths of the
// places to the others. 128 still holds a key shaped at 100/s with
// max_delay 1s. Past it, the key's requests that would wait are rejected
// as past the handler's bound: with Retry-After, consuming nothing.
const defaultMaxWaitingPerKey = defaultMaxWaiting / 8

// waiting counts one handler's requests held for their turn, up to limit,
// and per key, up to perKey.
//
// The per-key counts take no lock: a key's count is an atomic in an entry
// of a concurrent map (byKey), made by its first place and kept while it
// is used, so a hot key's places cost a lookup and an atomic each. Idle
// entries (no place held) are swept after every sweepEvery entries made,
// in the background: the map holds the keys with places plus at most
// about sweepEvery idle ones. A swept entry is marked gone (count below
// 0) before it leaves the map; a request that finds it gone makes a fresh
// one.
type waiting struct {
	n      atomic.Int64
	limit  int64
	perKey int64

	byKey    sync.Map     // store key → *keyPlaces
	made     atomic.Int64 // entries made: every sweepEvery, a sweep
	sweeping atomic.Bool  // a sweep runs

	full    throttle // logs, at most once per logInterval, that limit was reached
	keyFull throttle // the same for perKey
	logger  *zap.Logger
}

// keyPlaces counts the places of one key; gone once below 0.
type keyPlaces struct{ n atomic.Int64 }

// keyGone marks a keyPlaces that left its map.
const keyGone = -1

// sweepEvery is how many entries are made between two sweeps of the idle
// ones: as many as a handler holds places.
const sweepEvery = defaultMaxWaiting

// newWaiting is the count of a handler with zones, or nil when none of
// them has max_delay or the handler is a dry run (which never waits).
func newWaiting(zones []*Zone, dryRun bool, logger *zap.Logger) *waiting {
	if dryRun {
		return nil
	}
	for _, z := range zones {
		if z.MaxDelay > 0 {
			return &waiting{limit: defaultMaxWaiting, perKey: defaultMaxWaitingPerKey,
				full: throttle{interval: logInterval}, keyFull: throttle{interval: logInterval}, logger: logger}
		}
	}
	return nil
}

// place is one request's place among the waiting, or none (w nil): the
// handler's, and its keys' (key, then more when several of its zones may
// wait), each with the index of its request's zone. Once decided
// (keepDelayed) it is held only by a request that waits, and only for the
// keys of zones that delay it; wait gives it back when the wait is over
// (ServeHTTP, should the request panic before).
type place struct {
	w    *waiting
	key  *keyPlaces // nil once given back
	at   int        // key's zone
	more []heldKey
}

// heldKey is one more key's place, and its zone (an index of the
// request's zones).
type heldKey struct {
	k  *keyPlaces
	at int
}

// release gives the place back, once; a released place, or none, does
// nothing.
func (p *place) release() {
	if p.w == nil {
		return
	}
	if p.key != nil {
		p.w.leaveKey(p.key)
	}
	for _, h := range p.more {
		p.w.leaveKey(h.k)
	}
	p.w.n.Add(-1)
	*p = place{}
}

// keepDelayed keeps, once the request is decided as ds, only what its
// wait needs: the places of the keys whose zone delays it (Delay > 0), and
// the handler's while one does. The places of keys whose zone does not
// delay it would keep other requests of those keys from waiting; and a
// request that is denied, or that no zone delays, never waits, so it
// gives its whole place back now.
func (p *place) keepDelayed(ds []algorithms.Decision, denied bool) {
	if p.w == nil {
		return
	}
	if denied {
		p.release()
		return
	}
	if p.key != nil && (p.at >= len(ds) || ds[p.at].Delay == 0) {
		p.w.leaveKey(p.key)
		p.key = nil
	}
	kept := p.more[:0]
	for _, h := range p.more {
		if h.at >= len(ds) || ds[h.at].Delay == 0 {
			p.w.leaveKey(h.k)
			continue
		}
		kept = append(kept, h)
	}
	p.more = kept
	if p.key == nil && len(p.more) == 0 {
		p.release()
	}
}

// enterKey takes one place of key, unless it holds perKey already.
func (w *waiting) enterKey(key string) (*keyPlaces, bool) {
	for {
		v, ok := w.byKey.Load(key)
		if !ok {
			if v, ok = w.byKey.LoadOrStore(key, &keyPlaces{}); !ok {
				w.madeEntry()
			}
		}
		k := v.(*keyPlaces)
		n := k.n.Load()
		switch {
		case n < 0: // swept: help it leave, then make a fresh one
			w.byKey.CompareAndDelete(key, k)
		case n >= w.perKey:
			return nil, false
		case k.n.CompareAndSwap(n, n+1):
			return k, true
		}
	}
}

// leaveKey gives back one place of k (a held place keeps k from a sweep).
func (w *waiting) leaveKey(k *keyPlaces) { k.n.Add(-1) }

// madeEntry counts an entry made, and every sweepEvery starts sweeps in
// the background unless they run.
func (w *waiting) madeEntry() {
	if w.made.Add(1)%sweepEvery == 0 && w.sweeping.CompareAndSwap(false, true) {
		go w.sweeps()
	}
}

// maxSweeps bounds the sweeps one trigger runs.
const maxSweeps = 8

// sweeps sweeps, and again while at least sweepEvery entries were made
// during the last sweep (their triggers found it running, and were
// skipped), up to maxSweeps: idle entries stay about sweepEvery however
// fast fresh keys come.
func (w *waiting) sweeps() {
	defer w.sweeping.Store(false)
	for range maxSweeps {
		before := w.made.Load()
		w.sweep()
		if w.made.Load()-before < sweepEvery {
			return
		}
	}
}

// sweep takes the entries of keys holding no place out of the map.
func (w *waiting) sweep() {
	w.byKey.Range(func(key, v any) bool {
		if k := v.(*keyPlaces); k.n.CompareAndSwap(0, keyGone) {
			w.byKey.CompareAndDelete(key, k)
		}
		return true
	})
}

// releaseOnPanic gives the place back when its decision panics: the
// verdict holding it then never reaches its wait. Deferred by the backends
// once they took it.
func (p *place) releaseOnPanic() {
	if r := recover(); r != nil {
		p.release()
		panic(r)
	}
}

// take takes a place among the waiting for reqs, which may then be
// admitted to wait (max_delay): one of the handler's and one of each key
// whose zone has max_delay and is not a dry run. When every place of the handler, or of one of
// those keys, is taken, reqs may not wait: their zones decide as without
// max_delay, so a request that would have waited is rejected as if its
// wait were too long, and refused is true. A request none of whose zones
// may wait needs no place. A place is held from before the decision (a
// reservation is taken in the store) to the end of the wait, by a request
// that waits (keepDelayed); a key's, only while its zone delays it. A nil
// waiting has no places: its requests never wait.
func (w *waiting) take(reqs []algorithms.Request) (p place, refused bool) {
	if w == nil || !mayWait(reqs) {
		return place{}, false
	}
	if w.n.Add(1) > w.limit {
		w.n.Add(-1)
		w.refuse(reqs, &w.full, "max_delay: as many requests wait as a handler holds; those that would wait are rejected", w.limit)
		return place{}, true
	}
	p, ok := w.takeKeys(reqs)
	if !ok {
		w.n.Add(-1)
		w.refuse(reqs, &w.keyFull, "max_delay: as many requests of one key wait as a handler holds per key; that key's requests that would wait are rejected", w.perKey)
		return place{}, true
	}
	return p, false
}

// takeKeys takes a place of each key of reqs whose zone may hold it
// (AppliedMaxDelay: not a dry-run zone), all or none: false when one of
// them holds perKey already (the places taken before it are given back).
func (w *waiting) takeKeys(reqs []algorithms.Request) (place, bool) {
	p := place{w: w}
	for i := range reqs {
		if reqs[i].AppliedMaxDelay() <= 0 {
			continue
		}
		k, ok := w.enterKey(reqs[i].Key)
		if !ok {
			if p.key != nil {
				w.leaveKey(p.key)
			}
			for _, h := range p.more {
				w.leaveKey(h.k)
			}
			return place{}, false
		}
		if p.key == nil {
			p.key, p.at = k, i
		} else {
			p.more = append(p.more, heldKey{k, i})
		}
	}
	return p, true
}

// heldBy is how many places key holds.
func (w *waiting) heldBy(key string) int64 {
	if v, ok := w.byKey.Load(key); ok {
		return max(0, v.(*keyPlaces).n.Load())
	}
	return 0
}

// refuse decides reqs as without max_delay, and logs (through t, at most
// once per logInterval) that a bound of places was reached.
func (w *waiting) refuse(reqs []algorithms.Request, t *throttle, msg string, bound int64) {
	for i := range reqs {
		reqs[i].Limit.MaxDelay = 0
	}
	if n, ok := t.tickAt(time.Now()); ok {
		w.logger.Warn(msg, zap.Int64("waiting", bound), zap.Int("requests", n))
	}
}

// mayWait reports whether one of reqs' zones may hold it for its turn: a
// zone with max_delay that is not a dry run (AppliedMaxDelay).
func mayWait(reqs []algorithms.Request) bool {
	for i := range reqs {
		if reqs[i].AppliedMaxDelay() > 0 {
			return true
		}
	}
	return false
}

// wait holds the admitted request v for d, until the latest of its
// zones' turns (max_delay: observe found it and recorded it), and gives
// its place among the waiting back; false when the client left first:
// the request is not passed on, and its reservation stays spent (it was
// counted in the store when admitted). A wait is counted from when the
// decision arrived, so it ends no earlier than the store's turn.
func wait(ctx context.Context, v *verdict, d time.Duration) bool {
	if d <= 0 {
		v.place.release()
		return true
	}
	turn := waitTurn(ctx, d)
	v.place.release()
	return turn
}

// waitTurn waits for wait, or until ctx is done (a timer, no polling);
// true when the turn came.
func waitTurn(ctx context.Context, wait time.Duration) bool {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
