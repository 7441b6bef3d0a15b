package sluice

import (
	"errors"
	"strconv"

	"github.com/caddyserver/caddy/v2"

	"github.com/sluicehq/caddy-sluice/adaptive"
	"github.com/sluicehq/caddy-sluice/algorithms"
)

// request is this zone's part of the decision on the request repl describes,
// with key its store key, under a handler whose dry_run is handlerDryRun.
func (z *Zone) request(repl *caddy.Replacer, key string, handlerDryRun bool) algorithms.Request {
	limit := z.limitNow()
	if z.dynamic {
		limit = z.requestLimit(repl, limit)
	}
	if z.classes.n() > 1 { // priority on a concurrency zone: the class's share
		limit.Events = z.classShare(limit.Events, z.classes.of(repl))
	}
	r := algorithms.Request{
		Key:        key,
		Limit:      limit,
		DryRun:     z.DryRun,
		Slot:       z.newSlot(),
		Settles:    z.settle.any,
		Overrides:  z.Overrides,
		BanSeconds: z.banSeconds(handlerDryRun),
		Quota:      algorithms.QuotaAsk{For: z.quotaLease}, // the lease holder asks for units
	}
	// in a zone with overrides or a ban the store decides the cap, with
	// the key's override, after its ban (docs/algorithms.md, Cost)
	r.Cost = z.requestCost(repl, algorithms.CostCap(r))
	return r
}

// classShare is what a request of class may hold in flight of events, a
// concurrency zone's limit for the request: floor(events × (1 − reserve ×
// class/(n−1))), at least 1 (validation refuses a static events that
// leaves a class nothing; a per-request events that would is given 1).
func (z *Zone) classShare(events int64, class int) int64 {
	share := adaptive.Share(int(events), class, z.classes.n(), z.classes.reserve)
	return max(int64(share), 1)
}

// requestLimit is the limit of the request repl describes: the zone's,
// with events and burst from their placeholders where they expand to a
// whole number the zone accepts (1 to 10^9, sliding_log at most 10,000,
// within max_delay's bound), else the fallbacks.
func (z *Zone) requestLimit(repl *caddy.Replacer, l algorithms.Limit) algorithms.Limit {
	if n, ok := placeholderLimit(repl, z.EventsPlaceholder, z.eventsVar); ok {
		next := l
		next.Events = n
		if next.Validate() == nil {
			l = next
		}
	}
	if n, ok := placeholderLimit(repl, z.BurstPlaceholder, z.burstVar); ok {
		next := l
		next.Burst = n
		if next.Validate() == nil {
			l = next
		}
	}
	return l
}

// placeholderLimit is the whole number 1 to 10^9 that placeholder expands
// to, or false (no placeholder, empty, not a number, out of range); one
// is its variable when it is exactly one placeholder (singlePlaceholder),
// read without ReplaceAll's copy.
func placeholderLimit(repl *caddy.Replacer, placeholder, one string) (int64, bool) {
	if placeholder == "" {
		return 0, false
	}
	var value string
	if one != "" {
		val, _ := repl.Get(one)
		value = caddy.ToString(val)
	} else {
		value = repl.ReplaceAll(placeholder, "")
	}
	n, err := strconv.ParseInt(value, 10, 64)
	return n, err == nil && n >= 1 && n <= algorithms.MaxEvents
}

// requestCost expands a placeholder cost; what is not a positive integer
// costs 1, so a bad value never buys a free pass. A cost above the
// request's cap (algorithms.CostCap), however large, is clamped to cap + 1: still
// denied (the store answers it without counting), and no arithmetic on it
// overflows.
func (z *Zone) requestCost(repl *caddy.Replacer, capacity int64) int64 {
	if z.cost > 0 {
		return z.cost
	}
	cost, ok := parseCost(repl.ReplaceAll(z.Cost, ""))
	if !ok {
		return defaultCost
	}
	return min(cost, capacity+1)
}

// parseCost reads a positive integer cost; one past int64 saturates to
// math.MaxInt64, so that a cost above the limit stays above it.
func parseCost(s string) (int64, bool) {
	cost, err := strconv.ParseInt(s, 10, 64)
	if errors.Is(err, strconv.ErrRange) && cost > 0 {
		return cost, true // ParseInt saturates to MaxInt64
	}
	return cost, err == nil && cost >= 1
}
