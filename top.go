package sluice

import (
	"sync"

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

// topCounter is where a zone counts its denials by key: its name's window
// on a store that shares no top offenders (in memory), else the pending
// sketch its Redis client flushes. Chosen once, with the backend.
type topCounter interface{ Add(key string, n uint64) }

// counter is t's topCounter on a store that shares top offenders, or not.
func (t *zoneTop) counter(shared bool) topCounter {
	if shared {
		return t.pending
	}
	return t.window
}
