package sluice

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/adaptive"
)

// maxLimitersPerZone is the most limiters (key values) an adaptive zone
// keeps; past it the least recently used is dropped, and its key starts
// again at initial.
const maxLimitersPerZone = 100

// limiterSets keeps each adaptive zone's limiters across reloads, as
// Caddy modules keep state in a UsagePool: by zone name, events, min and
// classes, so a config that changes none of them keeps the limits,
// baselines, slots and queues, and one that changes them starts anew.
var limiterSets = caddy.NewUsagePool()

// adaptiveZone is what an adaptive zone sheds with.
type adaptiveZone struct {
	name     string
	poolKey  string
	set      *limiterSet
	shedding atomic.Bool  // logged as shedding
	lastShed atomic.Int64 // unix ns of its last shed request
}

// limiterSet is one zone's limiters, by key value, at most
// maxLimitersPerZone, the least recently used dropped first.
type limiterSet struct {
	mu    sync.Mutex
	cfg   adaptive.Config
	byKey map[string]*list.Element // of *keyedLimiter
	lru   list.List                // front: most recently used
}

type keyedLimiter struct {
	key string
	l   *adaptive.Limiter
}

func newLimiterSet(cfg adaptive.Config) *limiterSet {
	return &limiterSet{cfg: cfg, byKey: make(map[string]*list.Element)}
}

// Destruct lets the set go when no config holds it.
func (*limiterSet) Destruct() error { return nil }

// reconfigure applies what a kept set's new config may change.
func (s *limiterSet) reconfigure(cfg adaptive.Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg = cfg
	for _, e := range s.byKey {
		tolerance := cfg.Tolerance
		if tolerance == 0 {
			tolerance = adaptive.DefaultTolerance
		}
		e.Value.(*keyedLimiter).l.Reconfigure(tolerance, cfg.Reserve)
	}
}

// limiter is key's limiter, made at now if it has none.
func (s *limiterSet) limiter(key string, now time.Time) *adaptive.Limiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.byKey[key]; ok {
		s.lru.MoveToFront(e)
		return e.Value.(*keyedLimiter).l
	}
	if s.lru.Len() >= maxLimitersPerZone {
		oldest := s.lru.Back()
		s.lru.Remove(oldest)
		delete(s.byKey, oldest.Value.(*keyedLimiter).key)
	}
	kl := &keyedLimiter{key: key, l: adaptive.New(s.cfg, now)}
	s.byKey[key] = s.lru.PushFront(kl)
	return kl.l
}

// states sums the zone's limiters at now: limit, in flight and the
// lowest baseline, for gauges and the admin API. A zone with no limiter
// yet (no request since it started) reports the limit its first one
// starts at.
func (s *limiterSet) states(now time.Time) (st adaptive.State, n int) {
	s.mu.Lock()
	ls := make([]*adaptive.Limiter, 0, len(s.byKey))
	for _, e := range s.byKey {
		ls = append(ls, e.Value.(*keyedLimiter).l)
	}
	if len(ls) == 0 {
		st.Limit = s.cfg.InitialLimit()
	}
	s.mu.Unlock()
	for _, l := range ls {
		one := l.StateAt(now)
		st.Limit += one.Limit
		st.InFlight += one.InFlight
		st.Waiting += one.Waiting
		if st.Baseline == 0 || (one.Baseline > 0 && one.Baseline < st.Baseline) {
			st.Baseline = one.Baseline
		}
	}
	return st, len(ls)
}

// sheddingHysteresis is how long a zone sheds nothing before it is
// logged as having stopped.
const sheddingHysteresis = 10 * time.Second

// noteShedding logs one line when the zone starts shedding, and one when
// it has shed nothing for sheddingHysteresis (noticed at its next
// decision).
func (a *adaptiveZone) noteShedding(logger *zap.Logger, shed bool) {
	now := time.Now().UnixNano()
	if shed {
		if !a.shedding.Swap(true) {
			logger.Warn("adaptive zone started shedding load", zap.String("zone", a.name))
		}
		a.lastShed.Store(now)
		return
	}
	if a.shedding.Load() && time.Duration(now-a.lastShed.Load()) >= sheddingHysteresis && a.shedding.CompareAndSwap(true, false) {
		logger.Info("adaptive zone stopped shedding load", zap.String("zone", a.name))
	}
}

// liveShedZones are the adaptive zones in force, by name (the newest
// provision's limiters), that the gauges and the admin API read.
var liveShedZones = struct {
	sync.Mutex
	byName map[string]*limiterSet
}{byName: make(map[string]*limiterSet)}

func publishShedZone(name string, s *limiterSet) {
	liveShedZones.Lock()
	defer liveShedZones.Unlock()
	liveShedZones.byName[name] = s
}

func withdrawShedZone(name string, s *limiterSet) {
	liveShedZones.Lock()
	defer liveShedZones.Unlock()
	if liveShedZones.byName[name] == s {
		delete(liveShedZones.byName, name)
	}
}

// shedZoneState is an adaptive zone's state in force, summed over its
// limiters (key values); ok false when no such zone is in force.
func shedZoneState(name string) (limit, inFlight int, baseline time.Duration, ok bool) {
	liveShedZones.Lock()
	s := liveShedZones.byName[name]
	liveShedZones.Unlock()
	if s == nil {
		return 0, 0, 0, false
	}
	st, _ := s.states(time.Now())
	return st.Limit, st.InFlight, st.Baseline, true
}
