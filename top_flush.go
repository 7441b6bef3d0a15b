package sluice

import (
	"context"
	"maps"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// Flushing top offenders to a store that shares them with every instance
// (algorithms.TopSharer): each shared client flushes the counts of the
// zones on it, which the admin API then reads summed (registration.top).

// topFlushInterval is how often each instance adds the denials it counted
// to Redis: the admin API's top offenders lag the other instances by at
// most this much (its own instance's count is added as it stands).
const topFlushInterval = 5 * time.Second

// topFlushTimeout bounds one zone's flush.
const topFlushTimeout = 2 * time.Second

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
// s.top.flushed(). A periodic flush under way at done is cancelled (the
// counts of its zones not yet sent go back to be flushed), and the last
// flush ends topStopTimeout after done, whatever the periodic one took:
// within the wait of Destruct, while the client is open.
func flushTop(s *sharedClient, logger *zap.Logger) {
	defer close(s.top.flushed())
	var stopped time.Time // when done was closed; written before periodic ends
	periodic, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		select {
		case <-s.done:
			stopped = time.Now()
		case <-periodic.Done():
		}
		stop()
	}()
	tick := time.NewTicker(topFlushInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.done:
			<-periodic.Done() // stopped is written
			ctx, cancel := context.WithDeadline(context.Background(), stopped.Add(topStopTimeout))
			s.flushTopOnce(ctx, s.lastZones(), logger)
			cancel()
			return
		case <-tick.C:
			s.flushTopOnce(periodic, s.flushedZones(true), logger)
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
		s.top.zones[z.name] = z.storePrefix()
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
	zoneRegistry.Lock()
	defer zoneRegistry.Unlock()
	for name := range zones {
		if list := zoneRegistry.byName[name]; len(list) > 0 && list[len(list)-1].stores != &s.stores {
			delete(zones, name)
		}
	}
	return zones
}

// topZones returns the Redis key prefix of each zone name registered on s;
// a name registered by several handlers takes the newest's.
func (s *sharedClient) topZones() map[string]string {
	prefixes := make(map[string]string)
	zoneRegistry.Lock()
	defer zoneRegistry.Unlock()
	for name, list := range zoneRegistry.byName {
		for _, r := range list {
			if r.stores == &s.stores && !r.zone.isAdaptive() { // an adaptive zone denies no key in a store
				prefixes[name] = r.zone.storePrefix()
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
		err := s.stores.top.AddTop(zoneCtx, prefix, name, time.Now(), entries)
		cancel()
		if err != nil { // counted again, for the next flush
			for _, e := range entries {
				topFor(name).pending.Add(e.Key, e.Count)
			}
			logger.Debug("adding the top denied keys to redis", zap.String("zone", name), zap.Error(err))
		}
	}
}
