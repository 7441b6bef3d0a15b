package luascripts

import (
	"strings"
	"testing"
)

// TestComposeChecksLeases holds Compose to refusing a leasing algorithm
// whose file lacks its lease_end and grant, or whose lease flags disagree
// with its Go twin's.
func TestComposeChecksLeases(t *testing.T) {
	tests := []struct {
		name string
		alg  Algorithm
		err  string // "" when it composes
	}{
		{"a leasing algorithm with its lease code", Algorithm{Name: "fixed_window", File: "fixed_window.lua", Leases: true}, ""},
		{"one that does not lease", Algorithm{Name: "concurrency", File: "concurrency.lua"}, ""},
		{"flags as its twin's", Algorithm{Name: "token_bucket", File: "token_bucket.lua", Leases: true, TakenAtEnd: true}, ""},
		{"leasing without lease code", Algorithm{Name: "concurrency", File: "concurrency.lua", Leases: true}, "does not define its lease_end and grant"},
		{"taken at end in Lua only", Algorithm{Name: "token_bucket", File: "token_bucket.lua", Leases: true}, "lease_taken_at_end"},
		{"at end in Go only", Algorithm{Name: "sliding_window", File: "sliding_window.lua", Leases: true, AtEnd: true}, "lease_at_end"},
		{"lease code, said not to lease", Algorithm{Name: "sliding_log", File: "sliding_log.lua"}, "lease_at_end"},
	}
	for _, tt := range tests {
		_, err := Compose([]Algorithm{tt.alg})
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: error %v, want one with %q", tt.name, err, tt.err)
		}
	}
}
