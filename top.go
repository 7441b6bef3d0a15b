package sluice

import (
	"context"
	"maps"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/redisstore"
)

// topFlushInterval is how often each instance adds the denials it counted
// to Redis: the admin API's top offenders lag the other instances by at
// most this much (its own instance's count is added as it stands).
const topFlushInterval = 5 * time.Second

// topFlushTimeout bounds one zone's flush.
const topFlushTimeout = 2 * time.Second

// Top offenders defaults for the admin API's n.
const (
	defaultTopN = 10
	maxTopN     = 100
)

// topSketches are the zones' counts of denials by key, one per zone name
// in the process: zone names are global, so the handlers of a zone share
// it, and it outlives reloads as the counters do. A zone on Redis counts
// into pending, which the client's flusher drains every topFlushInterval;
// a zone in memory counts into window, which answers for the last 5
// minutes itself.
var topSketches = struct {
	sync.Mutex
	byName map[string]*zoneTop
}{byName: make(map[string]*zoneTop)}

// zoneTop is one zone name's sketches.
type zoneTop struct {
	pending *algorithms.TopKeys   // denials on Redis not yet flushed
	window  *algorithms.TopWindow // denials in memory, the last 5 minutes
}

// topFor returns zone name's sketches, made on first use.
func topFor(name string) *zoneTop {
	topSketches.Lock()
	defer topSketches.Unlock()
	t, ok := topSketches.byName[name]
	if !ok {
		t = &zoneTop{
			pending: algorithms.NewTopKeys(algorithms.DefaultTopKeys),
			window:  algorithms.NewTopWindow(algorithms.DefaultTopSpan, algorithms.DefaultTopSlots, algorithms.DefaultTopKeys),
		}
		topSketches.byName[name] = t
	}
	return t
}

// countDenied counts one denial of key: O(log k), and no allocation for a
// key the sketch tracks.
func (t *zoneTop) countDenied(key string, inMemory bool) {
	if inMemory {
		t.window.AddAt(time.Now(), key, 1)
		return
	}
	t.pending.Add(key, 1)
}

// top returns the n keys r's zone denied most in the last 5 minutes, by
// the denials each surely had (algorithms.Guaranteed): in memory from its
// window; on Redis the sum of every instance's flushes (each a guaranteed
// count) and this instance's denials not flushed yet.
func (r *registration) top(ctx context.Context, n int) ([]algorithms.Counted, error) {
	t := topFor(r.zone.name)
	now := time.Now()
	if !r.stores.remote || r.stores.server == nil {
		return algorithms.Guaranteed(n, t.window.TopAt(now, 0)), nil
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	flushed, err := redisstore.TopSets{Client: r.stores.server.client, Prefix: r.zone.redisPrefix, Zone: r.zone.name}.Read(ctx, now)
	if err != nil {
		return nil, err
	}
	return algorithms.Guaranteed(n, algorithms.MergeCounted(0, flushed, t.pending.Top(0))), nil
}

// topFlushes are the zones a shared client flushes: name → Redis key
// prefix, those registered on it at the last tick and those provisioned
// since (so a zone's counts are flushable from its first denial); and
// the channel closed once flushTop has flushed for the last time. The
// zero value is ready to use.
type topFlushes struct {
	mu    sync.Mutex
	zones map[string]string
	once  sync.Once
	end   chan struct{}
}

// flushed is closed once flushTop has flushed for the last time.
func (f *topFlushes) flushed() chan struct{} {
	f.once.Do(func() { f.end = make(chan struct{}) })
	return f.end
}

// flushTop adds, every topFlushInterval until done is closed, the denials
// counted by the zones on s to Redis: one call per zone. On done (the
// client's last handler cleaned up, its zones unregistered) it flushes
// once more every zone it knows, within topStopTimeout, and closes
// s.top.flushed().
func flushTop(s *sharedClient, logger *zap.Logger) {
	defer close(s.top.flushed())
	tick := time.NewTicker(topFlushInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.done:
			ctx, cancel := context.WithTimeout(context.Background(), topStopTimeout)
			s.flushTopOnce(ctx, s.lastZones(), logger)
			cancel()
			return
		case <-tick.C:
			s.flushTopOnce(context.Background(), s.flushedZones(true), logger)
		}
	}
}

// topStopTimeout bounds the last flush of a client's zones, which its
// last handler's Cleanup waits for (an instance that stops, or a reload
// onto other Redis settings).
const topStopTimeout = 3 * time.Second

// awaitLastTopFlush waits until flushTop has flushed for the last time, at
// most a little more than topStopTimeout (which bounds that flush).
func (s *sharedClient) awaitLastTopFlush() {
	t := time.NewTimer(topStopTimeout + time.Second)
	defer t.Stop()
	select {
	case <-s.top.flushed():
	case <-t.C:
	}
}

// flushesZones adds zones, just registered on s, to those s flushes.
func (s *sharedClient) flushesZones(zones []*Zone) {
	s.top.mu.Lock()
	defer s.top.mu.Unlock()
	if s.top.zones == nil {
		s.top.zones = make(map[string]string)
	}
	for _, z := range zones {
		s.top.zones[z.name] = z.redisPrefix
	}
}

// flushedZones returns a copy of the zones s flushes; with fromRegistry,
// first made those registered on s now (zones withdrawn since the last
// tick are left out from then on). The registry is read under s.top.mu, so
// a zone that flushesZones adds after its registration is never lost.
func (s *sharedClient) flushedZones(fromRegistry bool) map[string]string {
	s.top.mu.Lock()
	defer s.top.mu.Unlock()
	if fromRegistry {
		s.top.zones = s.topZones()
	}
	return maps.Clone(s.top.zones)
}

// lastZones are the zones of s's last flush: those it flushes, less those
// that handlers on another client now hold (a reload moved them to other
// Redis settings: the admin API reads them there, and that client flushes
// their counts, those of the old handlers' last requests included).
func (s *sharedClient) lastZones() map[string]string {
	zones := s.flushedZones(false)
	registry.Lock()
	defer registry.Unlock()
	for name := range zones {
		if list := registry.byName[name]; len(list) > 0 && list[len(list)-1].stores != &s.stores {
			delete(zones, name)
		}
	}
	return zones
}

// topZones returns the Redis key prefix of each zone name registered on s;
// a name registered by several handlers takes the newest's.
func (s *sharedClient) topZones() map[string]string {
	prefixes := make(map[string]string)
	registry.Lock()
	defer registry.Unlock()
	for name, list := range registry.byName {
		for _, r := range list {
			if r.stores == &s.stores {
				prefixes[name] = r.zone.redisPrefix
			}
		}
	}
	return prefixes
}

// flushTopOnce drains the sketch of each zone in prefixes and adds its
// guaranteed counts to Redis (which keeps no error bound: it sums what
// each key surely had), one call per zone within topFlushTimeout (and
// ctx); a failed flush is counted again for the next.
func (s *sharedClient) flushTopOnce(ctx context.Context, prefixes map[string]string, logger *zap.Logger) {
	for name, prefix := range prefixes {
		entries := algorithms.Guaranteed(0, topFor(name).pending.Drain())
		if len(entries) == 0 {
			continue
		}
		zoneCtx, cancel := context.WithTimeout(ctx, topFlushTimeout)
		err := redisstore.TopSets{Client: s.client, Prefix: prefix, Zone: name}.Add(zoneCtx, time.Now(), entries)
		cancel()
		if err != nil { // counted again, for the next flush
			for _, e := range entries {
				topFor(name).pending.Add(e.Key, e.Count)
			}
			logger.Debug("adding the top denied keys to redis", zap.String("zone", name), zap.Error(err))
		}
	}
}
