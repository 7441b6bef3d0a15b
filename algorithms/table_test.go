package algorithms

import "testing"

// TestCheckLease holds checkLease, which the table's entries pass as the
// package starts, to refusing an entry with half of a lease twin.
func TestCheckLease(t *testing.T) {
	whole := fixedWindowLease
	noGrant := leaseTwin{end: fixedWindowLease.end, longest: fixedWindowLease.longest}
	noLongest := leaseTwin{end: fixedWindowLease.end, grant: fixedWindowLease.grant}
	tests := []struct {
		name   string
		leases bool
		lease  *leaseTwin
		ok     bool
	}{
		{"leases with its twin", true, &whole, true},
		{"neither", false, nil, true},
		{"leases without a twin", true, nil, false},
		{"leases with a twin without grant", true, &noGrant, false},
		{"leases with a twin without longest", true, &noLongest, false},
		{"a twin without leasing", false, &whole, false},
	}
	for _, tt := range tests {
		s := Spec{Name: "made_up", Features: Features{Leases: tt.leases}, lease: tt.lease}
		if err := s.checkLease(); (err == nil) != tt.ok {
			t.Errorf("%s: checkLease() = %v, want ok %t", tt.name, err, tt.ok)
		}
	}
}
