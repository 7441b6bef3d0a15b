package sluice

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/headertest"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
	"github.com/sluicehq/caddy-sluice/redisstore"
)

// Tests of t as draft -11's effective window, for every algorithm, on the
// embedded store and on Redis, each at a clock the test sets: the headers
// are the writer's for real decisions (and Retry-After reject's), read
// with httpsfv, and each member's t is checked against the store itself
// at later instants.

// clockStore decides and settles as of a time the caller gives.
type clockStore interface {
	allowAt(t *testing.T, now time.Time, reqs []algorithms.Request) []algorithms.Decision
	settleAt(t *testing.T, now time.Time, ss []algorithms.Settlement)
}

type memoryClock struct{ m *algorithms.MemoryStore }

func (s memoryClock) allowAt(_ *testing.T, now time.Time, reqs []algorithms.Request) []algorithms.Decision {
	return s.m.AllowAt(now, reqs)
}

func (s memoryClock) settleAt(_ *testing.T, now time.Time, ss []algorithms.Settlement) {
	s.m.SettleAt(now, ss)
}

type redisClock struct{ s *redisstore.Store }

func (s redisClock) allowAt(t *testing.T, now time.Time, reqs []algorithms.Request) []algorithms.Decision {
	t.Helper()
	ds, err := s.s.AllowAt(context.Background(), now, reqs)
	if err != nil {
		t.Fatalf("allow: %v", err)
	}
	return ds
}

func (s redisClock) settleAt(t *testing.T, now time.Time, ss []algorithms.Settlement) {
	t.Helper()
	if err := s.s.SettleAt(context.Background(), now, ss); err != nil {
		t.Fatalf("settle: %v", err)
	}
}

var windowKeys atomic.Int64

// windowCase is a key brought to a state (setup, on the limited zone's
// key) and the request then decided: the limited zone, with cost and
// events (0: the zone's), and a wide zone beside it that admits.
type windowCase struct {
	name   string
	setup  func(t *testing.T, st clockStore, key string, now time.Time, l algorithms.Limit)
	cost   int64
	events int64
	dryRun bool
}

// admitAt admits n requests of cost 1 on key at now+offset, failing t if
// one is denied; it returns the last decision.
func admitAt(t *testing.T, st clockStore, key string, at time.Time, l algorithms.Limit, n int) algorithms.Decision {
	t.Helper()
	var d algorithms.Decision
	for i := range n {
		d = st.allowAt(t, at, []algorithms.Request{limitedRequest(key, l, at, 1)})[0]
		if !d.Allowed {
			t.Fatalf("setup: request %d at %v denied", i, at)
		}
	}
	return d
}

// limitedRequest is a request of key under l at now: a calendar zone's
// periods are those around now, a concurrency zone's slot is new.
func limitedRequest(key string, l algorithms.Limit, now time.Time, cost int64) algorithms.Request {
	if l.HasPeriod() {
		l.Periods = l.Calendar.PeriodsAt(now)
	}
	r := algorithms.Request{Key: key, Limit: l, Cost: cost}
	if l.Algorithm == algorithms.Concurrency {
		r.Slot, r.Cost = fmt.Sprintf("slot-%d", windowKeys.Add(1)), 1
	}
	return r
}

// spread admits used units: half 40 s before now, the rest 20 s before,
// so that the oldest come back before the newest.
func spread(used int) func(*testing.T, clockStore, string, time.Time, algorithms.Limit) {
	return func(t *testing.T, st clockStore, key string, now time.Time, l algorithms.Limit) {
		t.Helper()
		if used/2 > 0 {
			admitAt(t, st, key, now.Add(-40*time.Second), l, used/2)
		}
		if used-used/2 > 0 {
			admitAt(t, st, key, now.Add(-20*time.Second), l, used-used/2)
		}
	}
}

// settledDebt admits 4 units and then charges 30 more to the last of
// them (cost_from_response): a debt, capped at twice the limit.
func settledDebt(t *testing.T, st clockStore, key string, now time.Time, l algorithms.Limit) {
	t.Helper()
	spread(2)(t, st, key, now, l)
	at := now.Add(-20 * time.Second)
	d := admitAt(t, st, key, at, l, 2)
	st.settleAt(t, at, []algorithms.Settlement{{Key: key, Limit: limitedRequest(key, l, at, 1).Limit, At: d.At, Delta: 30}})
}

var (
	windowNow  = time.Date(2026, 6, 15, 12, 0, 0, 0, time.UTC)
	wideLimit  = algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 100, Window: time.Hour}
	windowAlgs = map[string]algorithms.Limit{
		"fixed_window":   {Algorithm: algorithms.FixedWindow, Events: 10, Window: time.Minute},
		"periods":        {Algorithm: algorithms.FixedWindow, Events: 10, Calendar: algorithms.Calendar{Period: algorithms.PeriodDay, Location: time.UTC}},
		"sliding_window": {Algorithm: algorithms.SlidingWindow, Events: 10, Window: time.Minute},
		"sliding_log":    {Algorithm: algorithms.SlidingLog, Events: 10, Window: time.Minute},
		"token_bucket":   {Algorithm: algorithms.TokenBucket, Events: 10, Window: time.Minute},
	}
	windowCases = []windowCase{
		{name: "allowed", setup: spread(3), cost: 1},
		{name: "allowed, the last unit", setup: spread(9), cost: 1},
		{name: "rejected", setup: spread(10), cost: 1},
		{name: "rejected, cost above r", setup: spread(8), cost: 3},
		{name: "debt (settled)", setup: settledDebt, cost: 1},
		{name: "debt (a lower limit)", setup: spread(10), cost: 1, events: 4},
		{name: "debt in a dry-run zone", setup: settledDebt, cost: 1, dryRun: true},
	}
	concurrencyLimit = algorithms.Limit{Algorithm: algorithms.Concurrency, Events: 3, Window: time.Minute}
	concurrencyCases = []windowCase{
		{name: "free slots", setup: spread(1), cost: 1},
		{name: "allowed, the last slot", setup: spread(2), cost: 1},
		{name: "full", setup: spread(3), cost: 1},
		{name: "over a lower limit", setup: spread(3), cost: 1, events: 1},
	}
)

// TestEffectiveWindow: for every algorithm, on both stores, in allowed,
// rejected and debt states, each RateLimit member's t is -11's effective
// window: the zone lets through no more than r until its last second and
// more at its end, or, for a zone that denied with r=0, the request passes
// at its end and not a second before; a dry-run zone, which never rejects,
// is written as a zone that admitted (t its MoreAfter); Retry-After is
// never earlier than t of any zone that denied or is a dry run, and
// RateLimit-Reset is t of the zone legacy reports.
func TestEffectiveWindow(t *testing.T) {
	stores := map[string]func(t *testing.T) clockStore{
		"memory": func(*testing.T) clockStore { return memoryClock{algorithms.NewMemoryStore()} },
		"redis": func(t *testing.T) clockStore {
			return redisClock{redisstore.New(redistest.Start(t).Client(t), redisstore.Options{})}
		},
	}
	for storeName, open := range stores {
		t.Run(storeName, func(t *testing.T) {
			st := open(t)
			for alg, l := range windowAlgs {
				for _, c := range windowCases {
					t.Run(alg+"/"+c.name, func(t *testing.T) { checkEffectiveWindow(t, st, l, c) })
				}
			}
			for _, c := range concurrencyCases {
				t.Run("concurrency/"+c.name, func(t *testing.T) { checkEffectiveWindow(t, st, concurrencyLimit, c) })
			}
		})
	}
}

// windowRequest is c's request on the keys at now: the limited zone's,
// then the wide zone's.
func (c windowCase) requests(keys [2]string, l algorithms.Limit, now time.Time) []algorithms.Request {
	if c.events > 0 {
		l.Events = c.events
	}
	limited := limitedRequest(keys[0], l, now, c.cost)
	limited.DryRun = c.dryRun
	return []algorithms.Request{limited, limitedRequest(keys[1], wideLimit, now, 1)}
}

// decideFresh brings new keys to c's state and decides c's request on them
// at windowNow.
func (c windowCase) decideFresh(t *testing.T, st clockStore, l algorithms.Limit) ([2]string, []algorithms.Request, []algorithms.Decision) {
	t.Helper()
	n := windowKeys.Add(1)
	keys := [2]string{fmt.Sprintf("sluice:limited:{%d}", n), fmt.Sprintf("sluice:wide:{%d}", n)}
	c.setup(t, st, keys[0], windowNow, l)
	reqs := c.requests(keys, l, windowNow)
	return keys, reqs, st.allowAt(t, windowNow, reqs)
}

func checkEffectiveWindow(t *testing.T, st clockStore, l algorithms.Limit, c windowCase) {
	_, reqs, ds := c.decideFresh(t, st, l)
	v := &verdict{zones: []*Zone{headerZone("limited", l), headerZone("wide", wideLimit)}, reqs: reqs, ds: ds}
	var retry int64
	if v.denies(0) || v.denies(1) {
		_, r := (&Handler{}).denial(v)
		retry = int64(r / time.Second)
	}
	h := http.Header{}
	(styleIETF | styleLegacy | styleX).writeAll(h, v, windowNow, retry)
	members, err := headertest.ParseList(h.Values("RateLimit"))
	if err != nil || len(members) != 2 {
		t.Fatalf("RateLimit %q: %v, want two members", h.Values("RateLimit"), err)
	}
	if got, want := h.Get("Retry-After") != "", retry > 0; got != want {
		t.Fatalf("Retry-After %q on a response denied=%v", h.Get("Retry-After"), want)
	}
	leastR, leastT := members[0].Values["r"], members[0].Values["t"]
	for i, m := range members {
		r, tw := m.Values["r"], m.Values["t"]
		t.Logf("%s: r=%d t=%d (decision %+v)", m.Name, r, tw, ds[i])
		if retry > 0 && (v.denies(i) || reqs[i].DryRun) {
			if got := intField(t, h, "Retry-After"); got < tw {
				t.Errorf("%s (denied or dry run): Retry-After %d < t %d", m.Name, got, tw)
			}
		}
		if r < leastR || r == leastR && tw > leastT {
			leastR, leastT = r, tw
		}
		if reqs[i].DryRun { // written as if it admitted: t is when it has more
			if want := ceilSeconds(ds[i].MoreAfter); tw != want && (retry == 0 || tw != retry) {
				t.Errorf("%s, a dry run: t=%d, want its MoreAfter %d (decision %+v)", m.Name, tw, want, ds[i])
			}
			continue
		}
		if reqs[i].Limit.Algorithm == algorithms.Concurrency {
			checkConcurrencyWindow(t, m.Name, r, tw, ds[i])
			continue
		}
		checkWindowAt(t, st, l, c, i, r, tw, ds[i])
	}
	if got := intField(t, h, "RateLimit-Reset"); got != leastT {
		t.Errorf("RateLimit-Reset %d, want %d, t of the zone with the least r and of those the longest t", got, leastT)
	}
	if got, want := intField(t, h, "X-RateLimit-Reset"), windowNow.Unix()+leastT; got != want {
		t.Errorf("X-RateLimit-Reset %d, want %d", got, want)
	}
}

// checkConcurrencyWindow: slots come back when responses end, which no
// store foresees: t is 0 while slots are free, else the second a
// rejection asks the client to wait.
func checkConcurrencyWindow(t *testing.T, name string, r, tw int64, d algorithms.Decision) {
	t.Helper()
	want := int64(0)
	if r == 0 {
		want = 1
	}
	if tw != want {
		t.Errorf("%s: r=%d t=%d, want t=%d (decision %+v)", name, r, tw, want, d)
	}
}

// checkWindowAt checks member i's t against the store: a zone that denied
// with r=0 lets the request through at t's end and not a second before;
// any other lets no more than r through a second before and more at the
// end (a zone with nothing used, t=0, has nothing to come back).
func checkWindowAt(t *testing.T, st clockStore, l algorithms.Limit, c windowCase, i int, r, tw int64, d algorithms.Decision) {
	t.Helper()
	at := func(s int64) algorithms.Decision {
		keys, _, _ := c.decideFresh(t, st, l)
		probe := c.requests(keys, l, windowNow.Add(time.Duration(s)*time.Second))[i]
		if d.Allowed || r > 0 {
			probe.Cost = 1
		}
		probe.DryRun = false
		return st.allowAt(t, windowNow.Add(time.Duration(s)*time.Second), []algorithms.Request{probe})[0]
	}
	available := func(d algorithms.Decision) int64 {
		if d.Allowed {
			return d.Remaining + 1 // the probe took one
		}
		return max(0, d.Remaining)
	}
	switch {
	case !d.Allowed && r == 0:
		if tw < 1 {
			t.Fatalf("member %d denied with r=0: t=%d, want ≥ 1", i, tw)
		}
		if got := at(tw); !got.Allowed {
			t.Errorf("member %d: denied again at t=%d: %+v", i, tw, got)
		}
		// A token bucket's state expires as the limit it was written under
		// drains it: under a lower limit the key may be forgotten, and the
		// request pass, before t (an algorithm's matter, not the headers').
		if c.events > 0 && l.Algorithm == algorithms.TokenBucket {
			break
		}
		if got := at(tw - 1); got.Allowed {
			t.Errorf("member %d: allowed at t-1=%d already: t is later than it need be", i, tw-1)
		}
	case tw == 0:
		if capacity := reqs0Capacity(c, l, i); r != capacity {
			t.Errorf("member %d: t=0 with r=%d, want the capacity %d (nothing used)", i, r, capacity)
		}
	default:
		if got := available(at(tw - 1)); got > r {
			t.Errorf("member %d: %d available at t-1=%d, more than r=%d", i, got, tw-1, r)
		}
		if got := available(at(tw)); got <= r {
			t.Errorf("member %d: %d available at t=%d, want more than r=%d", i, got, tw, r)
		}
	}
}

// reqs0Capacity is the capacity of member i of c's request.
func reqs0Capacity(c windowCase, l algorithms.Limit, i int) int64 {
	return c.requests([2]string{}, l, windowNow)[i].Limit.Capacity()
}

// TestDryRunWindow: a dry-run zone's t never asks a client to wait for a
// zone that does not enforce: on a rejection by another zone it is never
// past the Retry-After, and on an admission it is the time until it has
// more (its MoreAfter), not until it would let the request through.
func TestDryRunWindow(t *testing.T) {
	fixed := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 10, Window: time.Hour}
	tests := []struct {
		name      string
		enforced  algorithms.Decision
		dryRun    algorithms.Decision
		wantRetry int64 // 0: admitted
		wantT     int64 // the dry-run member's t
	}{
		{"rejected by the enforced zone, the dry run spent for an hour",
			algorithms.Decision{RetryAfter: 10 * time.Second, MoreAfter: 10 * time.Second},
			algorithms.Decision{RetryAfter: time.Hour, MoreAfter: time.Hour}, 10, 10},
		{"admitted, the dry run in debt for an hour",
			algorithms.Decision{Allowed: true, Remaining: 5, MoreAfter: 30 * time.Second},
			algorithms.Decision{Remaining: -20, RetryAfter: time.Hour, MoreAfter: 6 * time.Second}, 0, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := &verdict{
				zones: []*Zone{headerZone("enforced", fixed), headerZone("shadow", fixed)},
				reqs:  []algorithms.Request{{Key: "a", Limit: fixed}, {Key: "b", Limit: fixed, DryRun: true}},
				ds:    []algorithms.Decision{tt.enforced, tt.dryRun},
			}
			var retry int64
			if v.denies(0) || v.denies(1) {
				_, r := (&Handler{}).denial(v)
				retry = int64(r / time.Second)
			}
			if retry != tt.wantRetry {
				t.Fatalf("Retry-After: got %d, want %d", retry, tt.wantRetry)
			}
			h := http.Header{}
			(styleIETF | styleLegacy).writeAll(h, v, windowNow, retry)
			members, err := headertest.ParseList(h.Values("RateLimit"))
			if err != nil || len(members) != 2 {
				t.Fatalf("RateLimit %q: %v, want two members", h.Values("RateLimit"), err)
			}
			if got := members[1].Values["t"]; got != tt.wantT {
				t.Errorf("dry-run member: got t=%d, want %d (RateLimit %q)", got, tt.wantT, h.Values("RateLimit"))
			}
			if got := intField(t, h, "RateLimit-Reset"); got != tt.wantT {
				t.Errorf("RateLimit-Reset (the dry run has the least r): got %d, want %d", got, tt.wantT)
			}
		})
	}
}
