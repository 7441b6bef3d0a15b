package sluice

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

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

// top returns the n keys r's zone denied most in the last 5 minutes, by
// the denials each surely had (algorithms.Guaranteed): in memory from its
// window; on a store that shares top offenders (algorithms.TopSharer:
// Redis) the sum of every instance's flushes (each a guaranteed count) and
// this instance's denials not flushed yet.
func (r *registration) top(ctx context.Context, n int) ([]algorithms.Counted, error) {
	t := topFor(r.zone.name)
	now := time.Now()
	if r.stores.top == nil {
		return algorithms.Guaranteed(n, t.window.TopAt(now, 0)), nil
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	flushed, err := r.stores.top.ReadTop(ctx, r.zone.redisPrefix, r.zone.name, now)
	if err != nil {
		return nil, err
	}
	return algorithms.Guaranteed(n, algorithms.MergeCounted(0, flushed, t.pending.Top(0))), nil
}
