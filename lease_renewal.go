package sluice

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// Lease renewal: a concurrency zone's lease lives its zone's window from
// when it was taken or last renewed, so a request that runs longer than
// the window (a stream, a WebSocket, a slow upstream) renews its lease
// until its response is done: at most events requests run at once however
// long they last, and a crashed instance's leases end a window after
// their last renewal.
//
// Renewals are batched per store: one goroutine per store with leases
// held renews every lease that is due in one Settle (one call on Redis,
// riding the batcher with decisions and settlements), and stops when no
// lease is held.

// minRenewEvery is the shortest time between renewals of one lease.
const minRenewEvery = time.Millisecond

// maxRenewTimeout bounds one renewal call.
const maxRenewTimeout = time.Second

// maxRenewalsPerCall bounds the leases one call renews: a call blocks
// Redis while it runs, so thousands of streams renewed in one call would
// hold every other decision past its timeout. 256 is the most keys the
// Redis store puts in one call of decisions.
const maxRenewalsPerCall = 256

// renewEvery is how often a lease of window is renewed: every third of
// it (so two renewals in a row may fail before it ends), at least
// minRenewEvery.
func renewEvery(window time.Duration) time.Duration {
	return max(window/3, minRenewEvery)
}

// leaseRenewals is the process's lease renewers, one per store.
var leaseRenewals = renewals{byStore: make(map[algorithms.Settler]*renewer)}

// renewals holds the renewers; mu guards every renewer's leases too.
type renewals struct {
	mu      sync.Mutex
	byStore map[algorithms.Settler]*renewer
}

// renewer renews the leases held on one store.
type renewer struct {
	store  algorithms.Settler
	leases map[string]*heldLease // by lease id; guarded by renewals.mu
	wake   chan struct{}         // a lease came or went
}

// heldLease is one lease being renewed.
type heldLease struct {
	renewal algorithms.Settlement
	every   time.Duration
	due     time.Time
}

// start renews, on store, the leases reqs took (decided as ds), from now
// until stop.
func (rs *renewals) start(store algorithms.Settler, reqs []algorithms.Request, ds []algorithms.Decision) {
	now := time.Now()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var rn *renewer
	for i, r := range reqs {
		if r.Lease == "" || !ds[i].Allowed {
			continue
		}
		if rn == nil {
			rn = rs.renewerOf(store)
		}
		every := renewEvery(r.Limit.Window)
		rn.leases[r.Lease] = &heldLease{renewal: algorithms.Renewal(r), every: every, due: now.Add(every)}
	}
	if rn != nil {
		rn.poke()
	}
}

// renewerOf is store's renewer, started if none runs; rs.mu is held.
func (rs *renewals) renewerOf(store algorithms.Settler) *renewer {
	rn := rs.byStore[store]
	if rn == nil {
		rn = &renewer{store: store, leases: make(map[string]*heldLease), wake: make(chan struct{}, 1)}
		rs.byStore[store] = rn
		go rs.run(rn)
	}
	return rn
}

// stop ends the renewal of reqs' leases on store (their response is done).
func (rs *renewals) stop(store algorithms.Settler, reqs []algorithms.Request) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rn := rs.byStore[store]
	if rn == nil {
		return
	}
	for _, r := range reqs {
		if r.Lease != "" {
			delete(rn.leases, r.Lease)
		}
	}
	rn.poke()
}

// poke wakes rn's goroutine, which then looks at its leases again.
func (rn *renewer) poke() {
	select {
	case rn.wake <- struct{}{}:
	default:
	}
}

// run renews rn's leases as they fall due, until none is held.
func (rs *renewals) run(rn *renewer) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, next, ok := rs.due(rn, time.Now())
		if !ok {
			return
		}
		if len(due) > 0 {
			rn.renew(due)
			continue
		}
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-rn.wake: // Reset discards a pending tick (Go 1.23 timers)
		}
	}
}

// due takes the renewals of rn's leases due at now, with those due
// within half their interval (one call renews them all), and moves them
// to their next time; next is the earliest time one falls due after
// that. ok is false, and rn is gone, when rn holds no lease.
func (rs *renewals) due(rn *renewer, now time.Time) (due []algorithms.Settlement, next time.Time, ok bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if len(rn.leases) == 0 {
		delete(rs.byStore, rn.store)
		return nil, next, false
	}
	soon := false
	for _, l := range rn.leases {
		soon = soon || !l.due.After(now)
	}
	for _, l := range rn.leases {
		if soon && !l.due.After(now.Add(l.every/2)) {
			due = append(due, l.renewal)
			l.due = now.Add(l.every)
		}
		if next.IsZero() || l.due.Before(next) {
			next = l.due
		}
	}
	return due, next, true
}

// renew sends the renewals in Settles of at most maxRenewalsPerCall, one
// after another, each bounded by the shortest interval among them (and
// maxRenewTimeout). A failed renewal is not retried: the lease is renewed
// again at its next time, and lives until a window after its last
// renewal that succeeded.
func (rn *renewer) renew(due []algorithms.Settlement) {
	for len(due) > 0 {
		n := min(len(due), maxRenewalsPerCall)
		rn.renewCall(due[:n])
		due = due[n:]
	}
}

// renewCall sends renewals in one Settle.
func (rn *renewer) renewCall(renewals []algorithms.Settlement) {
	timeout := maxRenewTimeout
	for _, s := range renewals {
		timeout = min(timeout, renewEvery(s.Limit.Window))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_ = rn.store.Settle(ctx, renewals)
}
