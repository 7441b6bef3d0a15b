package algorithms

import (
	"testing"
	"time"
)

// TestLeaseRulesOf: a lease holder reads each algorithm's lease twin
// through LeaseRules: its longest lease, whether its leases are taken at
// their end (token_bucket only), and when the store stops taking a
// give-back; an algorithm that does not lease has none.
func TestLeaseRulesOf(t *testing.T) {
	const leaseFor = 250 * time.Millisecond
	g := QuotaGrant{End: 5_000_000}
	for _, s := range Specs() {
		rules, ok := LeaseRulesOf(s.Name)
		if ok != s.Leases {
			t.Errorf("%s: LeaseRulesOf ok %t, want Features.Leases %t", s.Name, ok, s.Leases)
		}
		l := Limit{Algorithm: s.Name, Events: 100, Window: time.Minute}
		if !ok {
			if rules.Longest(l) != 0 || rules.TakenAtEnd() || rules.Steady() {
				t.Errorf("%s: rules of an algorithm that does not lease: longest %v, taken at end %t", s.Name, rules.Longest(l), rules.TakenAtEnd())
			}
			continue
		}
		if got, want := rules.Longest(l), s.lease.longest(l); got != want {
			t.Errorf("%s: Longest %v, want its twin's %v", s.Name, got, want)
		}
		if got, want := rules.TakenAtEnd(), s.Name == TokenBucket; got != want {
			t.Errorf("%s: TakenAtEnd %t, want %t", s.Name, got, want)
		}
		if got, want := rules.Steady(), s.Name == FixedWindow; got != want {
			t.Errorf("%s: Steady %t, want %t", s.Name, got, want)
		}
		want := g.End + (leaseFor + QuotaGiveBackGrace).Microseconds()
		if rules.TakenAtEnd() {
			want = g.End
		}
		if got := rules.GiveBackEnd(g, leaseFor); got != want {
			t.Errorf("%s: GiveBackEnd %d, want %d", s.Name, got, want)
		}
	}
	if _, ok := LeaseRulesOf("made_up"); ok {
		t.Error("an unknown algorithm has lease rules")
	}
}
