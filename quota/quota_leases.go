package quota

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// Leases holds this instance's quota leases (algorithms/quota_lease.go): the
// outermost wrapper of a shared store, it admits a request in process,
// without the store, when every zone of it holds a live lease of its key,
// granted under the request's limit, with units left for its cost; else
// it asks the next store, and asks it for a lease (QuotaAsk.Units) sized
// by this instance's recent demand for each key, and installs the grants
// the answer carries.
//
// Never over: units are taken and the clock read under the locks of the
// request's keys, and that read is the admission instant; a lease is used
// only until S + (e − g)/(1 + 10⁻³) − 1 ms on the monotonic clock, S when
// its granting call was sent, g and e the grant's time and end on the
// store's clock, and not at all when e − g is under two round trips; a
// lease serves only the limit it was granted under. A lease running out
// (of units, or of time, within renewHorizon) is renewed by one grant-only
// call in the background; requests take from the earliest-ending lease
// first. A lease's unused units go back by one give-back when it ends,
// never retried; Forget drops leases without one (the store's generation
// has moved on); Close gives back every lease.
//
// Keys are spread over up to 64 shards by a maphash of the key, each with
// its own lock and its share of the bound on keys tracked (quota_demand.go).
// A request of which some zone does not lease (Quota.For 0, or a dry run)
// is passed on untouched: no lease decides it, and none would be granted.
type Leases struct {
	next    algorithms.Store
	holder  string
	observe func(key string, kind LeaseEvent, units int64)
	now     func() time.Time
	start   time.Time // now when made: quotaShard.seen's times count from it
	seed    maphash.Seed
	shards  []quotaShard

	rtt     atomic.Int64          // the last round trip to next, ns
	held    atomic.Int64          // leases held: the sweep runs while some are
	denials *algorithms.DenyCache // cached denials dropped when a request's leases are held (DropsDenials)

	reported  bool       // the next store reports give-backs (GiveBacksReportedBy): they are counted as it takes or refuses them
	mu        sync.Mutex // orders background calls with Close
	closed    atomic.Bool
	calls     sync.WaitGroup // background calls (renewals, give-backs)
	autoSweep bool           // on the real clock, a goroutine sweeps while leases are held
	sweeping  bool
	sweeper   sync.WaitGroup
	stop      chan struct{}
}

// LeaseEvent is what happened to leased units, for metrics: the observe
// callback of NewLeases gets a kind and a count of units.
type LeaseEvent uint8

const (
	// LeaseGranted: units a grant installed.
	LeaseGranted LeaseEvent = iota
	// LeaseUsed: units requests took from a lease (their costs).
	LeaseUsed
	// LeaseReturned: unused units of an ended lease given back: taken by
	// the store, when it reports give-backs (GiveBacksReportedBy), else
	// sent.
	LeaseReturned
	// LeaseExpired: unused units of a lease dropped without a give-back:
	// by Forget (a reset or an override of its key), or ended when the
	// store would surely refuse it.
	LeaseExpired
	// LeaseRefused: unused units of a give-back the store refused (its
	// key's generation moved on, it came too late): they stay counted
	// until their window ends.
	LeaseRefused
)

func (k LeaseEvent) String() string {
	switch k {
	case LeaseGranted:
		return "granted"
	case LeaseUsed:
		return "used"
	case LeaseReturned:
		return "returned"
	case LeaseExpired:
		return "expired"
	case LeaseRefused:
		return "refused"
	}
	return "unknown"
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

// maxStackZones is how many zones a request may have for Allow to keep
// its scratch space on the stack.
const maxStackZones = 8

// NewLeases holds quota leases of next for this instance, named
// holder in the stores' lease bookkeeping (an instance's ID, the same
// across reloads), tracking at most DefaultKeys keys. observe, if
// not nil, is called with each zone key's leased units (LeaseEvent); it
// must be quick and must not call back.
func NewLeases(next algorithms.Store, holder string, observe func(key string, kind LeaseEvent, units int64)) *Leases {
	return NewLeasesOf(next, holder, observe, DefaultKeys, nil)
}

// NewLeasesOf is NewLeases tracking at most keys keys, reading
// the monotonic clock from now (nil: time.Now). With a clock of its own
// (a replay's, which must never go back), nothing sweeps in the
// background: the caller calls Sweep as its clock advances.
func NewLeasesOf(next algorithms.Store, holder string, observe func(key string, kind LeaseEvent, units int64), keys int, now func() time.Time) *Leases {
	keys = max(1, keys)
	n := 1
	for n*2 <= maxQuotaShards && n*2*quotaShardMin <= keys {
		n *= 2
	}
	if observe == nil {
		observe = func(string, LeaseEvent, int64) {}
	}
	autoSweep := now == nil
	if autoSweep {
		now = time.Now
	}
	q := &Leases{next: next, holder: holder, observe: observe, now: now, start: now(), seed: maphash.MakeSeed(),
		shards: make([]quotaShard, n), autoSweep: autoSweep, stop: make(chan struct{})}
	for i := range q.shards {
		q.shards[i].index = make(map[string]int32)
		q.shards[i].size = max(1, keys/n)
		q.shards[i].seen = make([]uint64, seenEntries(keys/n))
	}
	return q
}

// maxQuotaShards bounds the shards; quotaShardMin is the fewest keys a
// shard is given.
const (
	maxQuotaShards = 64
	quotaShardMin  = 1024
)

// Allow admits reqs from their leases when every zone holds one for its
// cost (as Take does), else asks the next store, with an ask for a lease
// per zone, and installs the grants of its answer. Asking none, it names
// this holder in reqs (Quota.Holder): the store counts it as a taker.
func (q *Leases) Allow(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	if !allLease(reqs) || q.closed.Load() {
		return q.next.Allow(ctx, reqs)
	}
	var askBuf [maxStackZones]int64
	ds, asks := q.decide(reqs, askBuf[:0], false)
	if ds != nil {
		return ds, nil
	}
	return q.ask(ctx, reqs, asks)
}

// Take admits reqs from their leases, with no call, when every zone holds
// one for its cost; else it returns nil and records nothing, for Allow to
// decide them. So a caller may try it before what only a call needs (a
// deadline, a cached denial, which a held lease has dropped). A zone
// admitted from a lease answers Leased, with the grant's decision: Quota
// its grant, Remaining the store's at the key's latest grant plus the
// units of its limit leased not yet used (quotaKey.remaining), At,
// ResetAfter and MoreAfter moved on by the time since the grant's answer
// (at the store's slowest, so that t is never early).
func (q *Leases) Take(reqs []algorithms.Request) []algorithms.Decision {
	if !allLease(reqs) || q.closed.Load() {
		return nil
	}
	var askBuf [maxStackZones]int64
	ds, _ := q.decide(reqs, askBuf[:0], true)
	return ds
}

// decide is take's decision with what follows it: the leases it dropped
// given back, the units used counted, a renewal started when due; asks
// (on the stack for up to maxStackZones zones) are the store call's when
// not admitted.
func (q *Leases) decide(reqs []algorithms.Request, asks []int64, leasedOnly bool) ([]algorithms.Decision, []int64) {
	if len(reqs) > cap(asks) {
		asks = make([]int64, 0, len(reqs))
	}
	ds, asks, renew, dropped := q.take(reqs, asks, leasedOnly)
	if len(dropped) > 0 {
		q.held.Add(-int64(len(dropped)))
		q.giveBack(dropped)
	}
	if ds == nil {
		return nil, asks
	}
	for i := range reqs {
		q.observe(reqs[i].Key, LeaseUsed, reqs[i].Cost)
	}
	if renew {
		q.renew(reqs, asks)
	}
	return ds, asks
}

// allLease reports whether every zone of reqs leases, so that a lease may
// decide them and a grant may be made.
func allLease(reqs []algorithms.Request) bool {
	for i := range reqs {
		if !reqs[i].Leases() || reqs[i].DryRun {
			return false
		}
	}
	return len(reqs) > 0
}

func (q *Leases) shardOf(key string) int { return q.shardIn(q.hash(key)) }

func (q *Leases) hash(key string) uint64 { return maphash.String(q.seed, key) }

// shardIn is the shard of a key of hash h (its low bits; quotaShard.seen
// reads higher ones).
func (q *Leases) shardIn(h uint64) int { return int(h & uint64(len(q.shards)-1)) }

// lock locks the distinct shards of reqs' keys in index order, appending
// each request's key's hash to hs and the shards locked to idx.
func (q *Leases) lock(reqs []algorithms.Request, hs []uint64, idx []int) ([]uint64, []int) {
	for i := range reqs {
		h := q.hash(reqs[i].Key)
		hs = append(hs, h)
		if s := q.shardIn(h); !slices.Contains(idx, s) {
			idx = append(idx, s)
		}
	}
	slices.Sort(idx)
	for _, s := range idx {
		q.shards[s].mu.Lock()
	}
	return hs, idx
}

func (q *Leases) unlock(idx []int) {
	for _, s := range idx {
		q.shards[s].mu.Unlock()
	}
}

// take decides reqs from their leases under their shards' locks, in
// three steps: take from the leases (takeFromLeases, rolled back unless
// every zone had one), plan the asks (plan: the demand recorded, the
// sizes of a renewal or of the store call's grant, none for a cold key),
// and, admitted, build the answers (answers). Admitted, it returns the
// decisions, and whether a renewal is due, with asks its sizes; else nil
// and the asks for the store call. asks is nil when no lease is asked
// (some zone would not use one). dropped are the leases of keys it
// stopped tracking to make room, to give back. leasedOnly: not admitted,
// it returns at once, having recorded nothing.
func (q *Leases) take(reqs []algorithms.Request, asks []int64, leasedOnly bool) (ds []algorithms.Decision, _ []int64, renew bool, dropped []*quotaLease) {
	var buf takingBuf
	t := buf.taking(len(reqs))
	t.hs, t.idx = q.lock(reqs, t.hs, t.idx)
	defer q.unlock(t.idx)
	now := q.now() // the admission instant
	var admitted bool
	t.keys, t.from, admitted = q.takeFromLeases(now, reqs, t.hs, t.keys, t.from)
	if !admitted && leasedOnly {
		return nil, asks, false, nil
	}
	asks, renew, dropped = q.plan(now, reqs, t, admitted, asks)
	if !admitted {
		return nil, asks, false, dropped
	}
	return q.answers(now, reqs, t), asks, renew && markRenewing(t.keys), dropped
}

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

// takeFromLeases takes each request's cost from a live lease of its key
// (of hash hs[i]) and reports whether every one had one; if not, what was
// taken goes back. It appends each request's key (nil: untracked) to keys
// and the leases taken from to from.
func (q *Leases) takeFromLeases(now time.Time, reqs []algorithms.Request, hs []uint64, keys []*quotaKey, from []*quotaLease) ([]*quotaKey, []*quotaLease, bool) {
	for i := range reqs {
		k := q.shards[q.shardIn(hs[i])].find(reqs[i].Key)
		keys = append(keys, k)
		if len(from) == i {
			if l := k.takeFrom(now, &reqs[i]); l != nil {
				from = append(from, l)
			}
		}
	}
	if len(from) == len(reqs) {
		return keys, from, true
	}
	for i, l := range from {
		l.used -= reqs[i].Cost
		keys[i].taken -= reqs[i].Cost
	}
	return keys, from, false
}

// plan records each request's demand (tracking its key once it has been
// seen enough: quotaShard.seenEnough) and appends each zone's ask to
// asks: what the demand needs in a lease's life less the units left, at
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
		asks = append(asks, max(2, r.Cost, ask-left)) // what the units left lack, but a lease that serves
	}
	if !cold && (renew || !admitted) { // the asks are sent: only leases worth having
		for i := range reqs {
			cold = cold || !q.worthAsking(&reqs[i])
		}
	}
	switch {
	case cold && admitted:
		return nil, false, dropped
	case cold: // none asks; a key this instance does not track is decided as without leases
		asks = asks[:0]
		for i := range reqs {
			a := askNone
			if t.keys[i] == nil {
				a = askUntracked
			}
			asks = append(asks, a)
		}
	}
	return asks, renew, dropped
}

// The asks of a store call that asks no lease: askNone, the store counts
// this holder as a taker of the key (the key's holders' answers allow for
// it); askUntracked, for a key this instance does not track (quotaShard.seenEnough),
// the store decides it as without leases and reads no lease bookkeeping:
// a cold key costs Redis what it costs with quota_lease off.
const (
	askNone      int64 = 0
	askUntracked int64 = -1
)

// asking reports whether asks ask every zone a lease.
func asking(asks []int64) bool {
	for _, a := range asks {
		if a <= 0 {
			return false
		}
	}
	return len(asks) > 0
}

// answers is the decision of each request admitted from its lease (t.from)
// at now (Leases.answer); a lease spent goes.
func (q *Leases) answers(now time.Time, reqs []algorithms.Request, t taking) []algorithms.Decision {
	ds := make([]algorithms.Decision, len(reqs))
	for i, l := range t.from {
		ds[i] = q.answer(now, l, t.keys[i], t.left[i])
	}
	for i, l := range t.from {
		if l.used >= l.units && q.shards[q.shardIn(t.hs[i])].remove(t.keys[i], l) { // spent: nothing to give back
			q.held.Add(-1)
		}
	}
	return ds
}

// takeFrom takes r's cost from the earliest-ending live lease of k (r's
// key; nil: untracked) that has enough left, and returns it (nil: none).
func (k *quotaKey) takeFrom(now time.Time, r *algorithms.Request) *quotaLease {
	if k == nil {
		return nil
	}
	for _, l := range k.leases {
		if l.live(now, r) {
			l.used += r.Cost
			k.taken += r.Cost
			return l
		}
	}
	return nil
}

// ask sends reqs to the next store, with asks (plan), and installs the
// grants its answer carries.
func (q *Leases) ask(ctx context.Context, reqs []algorithms.Request, asks []int64) ([]algorithms.Decision, error) {
	var ds []algorithms.Decision
	var err error
	if asking(asks) {
		ds, err = q.grant(ctx, q.asking(reqs, asks, false))
	} else {
		s := q.now()
		ds, err = q.askingNone(ctx, reqs, asks)
		q.measured(s, q.now(), err) // a key asking none (worthAsking) still measures the round trip
	}
	for i := range ds {
		switch {
		case ds[i].Banned || ds[i].BanStarted: // the reset channel tells every holder, this one too, but later: Take would admit until then
			q.Forget(reqs[i].Key)
		case ds[i].Quota.Takers > 0: // a key with lease bookkeeping: give-backs may raise the store's word
			ds[i] = q.steady(ds[i], &reqs[i])
		}
	}
	return ds, err
}

// askingNone sends reqs to the next store asking no lease: a zone of
// askNone names this holder (Quota.Holder), one of askUntracked is sent
// as not leasing (Quota.For 0, as it was once the call returns).
func (q *Leases) askingNone(ctx context.Context, reqs []algorithms.Request, asks []int64) ([]algorithms.Decision, error) {
	var forBuf [maxStackZones]time.Duration
	fors := forBuf[:0]
	for i := range reqs {
		fors = append(fors, reqs[i].Quota.For)
		if asks[i] == askUntracked {
			reqs[i].Quota.For = 0
		} else {
			reqs[i].Quota.Holder = q.holder
		}
	}
	defer func() {
		for i := range reqs {
			reqs[i].Quota.For = fors[i]
		}
	}()
	return q.next.Allow(ctx, reqs)
}

// steady is the store's decision d of r as this instance answers it:
// within a fixed window, no higher than what it answered before for r's
// key (quotaKey.steady), when that key is tracked. A key the store keeps
// no lease bookkeeping for (a cold one) has nothing given back to raise
// its count within a window, and is not looked up.
func (q *Leases) steady(d algorithms.Decision, r *algorithms.Request) algorithms.Decision {
	if r.Limit.Algorithm != algorithms.FixedWindow {
		return d
	}
	sh := &q.shards[q.shardOf(r.Key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if k := sh.find(r.Key); k != nil {
		d = k.steady(d, r.Limit)
	}
	return d
}

// asking is a copy of reqs asking for leases of asks units, none shorter
// than this holder can use (shortestLease); grantOnly: of cost 0 (a
// renewal).
func (q *Leases) asking(reqs []algorithms.Request, asks []int64, grantOnly bool) []algorithms.Request {
	sent := slices.Clone(reqs)
	for i := range sent {
		sent[i].Quota.Units = asks[i]
		sent[i].Quota.Min = q.shortestLease(&sent[i])
		sent[i].Quota.Holder = q.holder
		if grantOnly {
			sent[i].Cost = 0
		}
	}
	return sent
}

// grant sends sent, asking for leases, and installs the grants of the
// answer.
func (q *Leases) grant(ctx context.Context, sent []algorithms.Request) ([]algorithms.Decision, error) {
	resets := make([]uint64, len(sent)) // of each key's shard: a grant asked before a Forget of its key is not held
	for i := range sent {
		resets[i] = q.shards[q.shardOf(sent[i].Key)].resets.Load()
	}
	s := q.now()
	ds, err := q.next.Allow(ctx, sent)
	a := q.now()
	q.measured(s, a, err)
	if err == nil && len(ds) == len(sent) {
		q.install(sent, ds, s, a, resets)
	}
	return ds, err
}

// install holds the grants of ds, answered at a to sent sent at s: all
// zones got one, or none is held (and those granted go back). All held,
// each decision's Remaining is r as its key's leases answer it
// (quotaKey.remaining). A lease shorter than two round trips, or over by
// the time of the answer, is not held either, nor one asked before a
// Forget or held after Close.
func (q *Leases) install(sent []algorithms.Request, ds []algorithms.Decision, s, a time.Time, resets []uint64) {
	granted := 0
	for i := range ds {
		if ds[i].Quota.Units > 0 {
			granted++
		}
	}
	if granted == 0 {
		return
	}
	leases := make([]*quotaLease, 0, granted)
	for i := range ds {
		if g := ds[i].Quota; g.Units > 0 {
			end := heldUntil(sent[i].Limit.Algorithm, ds[i], s, a)
			leases = append(leases, &quotaLease{req: sent[i], grant: ds[i], units: g.Units, answered: a, end: end, resets: resets[i]})
			q.observe(sent[i].Key, LeaseGranted, g.Units)
		}
	}
	rtt := a.Sub(s)
	if granted < len(ds) || !algorithms.Admitted(sent, ds) {
		q.giveBack(leases)
		return
	}
	var back []*quotaLease
	remaining := make([]int64, len(leases))
	for i, l := range leases {
		if time.Duration(l.grant.Quota.End-l.grant.At)*time.Microsecond < 2*rtt || !l.end.After(a) {
			back = append(back, l)
			continue
		}
		held, r := q.hold(l, a)
		if !held {
			back = append(back, l)
			continue
		}
		remaining[i] = r
	}
	q.giveBack(back)
	if len(back) > 0 { // the leases held cannot admit alone: r stays the store's
		return
	}
	for i := range ds {
		ds[i].Remaining = remaining[i] // r of the granting request: as from the leases it holds (answer)
	}
	if q.denials != nil {
		q.denials.Drop(sent) // its leases may admit it now
	}
}

// GiveBacksReportedBy makes q count its give-backs as r, the store its
// next store passes them to, takes or refuses them (LeaseReturned,
// LeaseRefused), instead of as sent. Call it before q is used.
func (q *Leases) GiveBacksReportedBy(r algorithms.GiveBackReporter) {
	q.reported = true
	r.ReportGiveBacks(func(key string, units int64, taken bool) {
		kind := LeaseRefused
		if taken {
			kind = LeaseReturned
		}
		q.observe(key, kind, units)
	})
}

// DropsDenials makes q drop a request's denial cached in c once every
// zone of it holds a lease, so that c, looked up once q's leases could
// not decide a request (Take), holds no denial those leases would have
// to outlast. Call it before q is used.
func (q *Leases) DropsDenials(c *algorithms.DenyCache) { q.denials = c }
