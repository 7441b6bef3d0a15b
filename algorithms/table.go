package algorithms

import (
	"fmt"
	"strings"
)

// table is every algorithm, in the order the Caddyfile, errors and the
// decide code list them. Everything that depends on which algorithm a
// zone runs reads it from here: Limit.Validate, the Caddyfile's accepted
// names (Names), the Lua the Redis store loads (Spec.Lua), the memory
// store's Go twins (decide, settle and, for one that leases, its quota
// leases), the state key suffix (StateSuffix) and the options a zone may
// set (Features). Adding an algorithm is its Go file, its Lua file, one
// entry here and its docs.
var table = []Spec{
	{
		Name: FixedWindow, Lua: "fixed_window.lua",
		// v2: the counters as packed doubles instead of decimal text.
		StateSuffix: ":v2",
		decide:      fixedWindow, settle: fixedWindowSettle, lease: &fixedWindowLease,
		Features: Features{Period: true, Placeholders: true, Overrides: true, Settles: true, Leases: true},
	},
	{
		Name: SlidingWindow, Lua: "sliding_window.lua",
		// v3: a slotted window (a running total and the slots in use as
		// packed doubles) instead of the weighted two-window counter that
		// v2 stored (three packed doubles, 24 bytes: a v3 state of one
		// slot is 24 bytes too, so the suffix, not the length, tells them
		// apart).
		StateSuffix: ":v3",
		decide:      slidingWindow, settle: slidingWindowSettle, lease: &slidingWindowLease,
		Features: Features{Placeholders: true, Overrides: true, Settles: true, Leases: true},
	},
	{
		Name: SlidingLog, Lua: "sliding_log.lua",
		// v4: one sorted-set member per time with its units, and a member
		// holding the total, instead of one member per unit.
		StateSuffix: ":v4",
		decide:      slidingLog, settle: slidingLogSettle, lease: &slidingLogLease,
		Features: Features{Placeholders: true, Overrides: true, Settles: true, Leases: true,
			EventsCap: EventsCap{Max: MaxLogEvents, Why: "keeps an entry per request, up to one per event",
				Instead: "use sliding_window for larger limits"}},
	},
	{
		Name: TokenBucket, Lua: "token_bucket.lua",
		// v5: whole events, the fraction and the time as packed doubles
		// instead of decimal text.
		StateSuffix: ":v5",
		decide:      tokenBucket, settle: tokenBucketSettle, lease: &tokenBucketLease,
		Features: Features{Burst: true, MaxDelay: true, Placeholders: true, Overrides: true, Settles: true, Leases: true},
	},
	{
		Name: Concurrency, Lua: "concurrency.lua",
		decide: concurrency, settle: concurrencySettle,
		Features: Features{Placeholders: true, Overrides: true, InFlight: true, DefaultWindow: DefaultConcurrencyWindow},
	},
}

// Spec is one algorithm: its name, its Lua, its state format, its Go twin
// and what it supports.
type Spec struct {
	Name Algorithm
	// Lua is the file in luascripts/ that defines the algorithm for the
	// decide code, as algorithms.<Name> (its decide, commit and settle;
	// lease_end and grant when it leases).
	Lua string
	// StateSuffix is what its store keys end with (see StateSuffix).
	StateSuffix string
	Features
	// decide and settle are its Go twin (their types in
	// memory_algorithms.go), run by the memory store.
	decide decideFunc
	settle settleFunc
	// lease is the Go twin of its quota leases, set exactly when
	// Features.Leases is (checked as the package starts); nil for an
	// algorithm that does not lease.
	lease *leaseTwin
}

// LeaseFlags are the flags of s's lease twin (leaseTwin.takenAtEnd,
// atEnd; false without one), which its Lua sets alike (the Redis store
// checks them as it composes its code).
func (s *Spec) LeaseFlags() (takenAtEnd, atEnd bool) {
	if s.lease == nil {
		return false, false
	}
	return s.lease.takenAtEnd, s.lease.atEnd
}

// leaseOf is a's lease twin: nil when a does not lease (or is unknown).
func leaseOf(a Algorithm) *leaseTwin {
	if s, ok := specs[a]; ok {
		return s.lease
	}
	return nil
}

// specs finds a table entry by name. Building it checks that each entry
// that leases has its whole lease twin and only those have one, so a
// half-added algorithm stops every program and test at once.
var specs = func() map[Algorithm]*Spec {
	m := make(map[Algorithm]*Spec, len(table))
	for i := range table {
		if err := table[i].checkLease(); err != nil {
			panic(err)
		}
		m[table[i].Name] = &table[i]
	}
	return m
}()

// checkLease reports an entry whose lease twin and Features.Leases
// disagree: each needs the other, and the twin needs its end, grant and
// longest.
func (s *Spec) checkLease() error {
	switch {
	case s.Leases && (s.lease == nil || s.lease.end == nil || s.lease.grant == nil || s.lease.longest == nil):
		return fmt.Errorf("algorithms: %s has Features.Leases but no lease twin with end, grant and longest (Spec.lease, from its Go file)", s.Name)
	case !s.Leases && s.lease != nil:
		return fmt.Errorf("algorithms: %s has a lease twin (Spec.lease) but not Features.Leases", s.Name)
	}
	return nil
}

// Specs is the table of algorithms, in order (a copy).
func Specs() []Spec { return append([]Spec(nil), table...) }

// Names are the algorithms' names, in the table's order.
func Names() []string {
	names := make([]string, len(table))
	for i, s := range table {
		names[i] = string(s.Name)
	}
	return names
}

// NamesWith lists the names of the algorithms with every feature set in
// want, in the table's order, for errors: "a", "a or b", "a, b or c".
func NamesWith(want Features) string {
	var names []string
	for _, s := range table {
		if s.has(want) {
			names = append(names, string(s.Name))
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
