package sluice

import (
	"github.com/caddyserver/caddy/v2"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// verdict is one request's way through a handler: the zones that matched
// it, their store requests and the store's decisions, index by index. It
// lives on ServeHTTP's stack, so the three go together at no allocation:
// the backend takes and returns it by value, the rest by pointer.
type verdict struct {
	zones   []*Zone
	reqs    []algorithms.Request
	ds      []algorithms.Decision // nil: failure_mode open passed the request undecided
	denied  bool                  // a zone that is not a dry run denied: the store's verdict
	settles bool                  // admitted, it has a zone that settles after the response (a dry-run denial took nothing, nor did failure_mode open)
	failed  string                // the failure_mode that decided, when the store failed (local: ds came from its store); "" when the store decided
	repl    *caddy.Replacer       // what the zones' templates expand with
	keys    []string              // the zones' keys, expanded, when log_key asks for them
	place   place                 // the request's place among the waiting (max_delay)
}

// capacity is the capacity of zone i for this request: its own limit
// (events and burst may come from the request).
func (v *verdict) capacity(i int) int64 {
	if v.reqs == nil {
		return v.zones[i].limit.Capacity()
	}
	return v.reqs[i].Limit.Capacity()
}

// denies reports whether zone i denies the request: it did not admit, and
// it is not a dry run.
func (v *verdict) denies(i int) bool { return !v.ds[i].Allowed && !v.reqs[i].DryRun }
