package adaptive

import "testing"

func TestShare(t *testing.T) {
	tests := []struct {
		name            string
		limit, class, n int
		reserve         float64
		want            int
	}{
		{"one class: the limit, reserve unused", 10, 0, 1, 0.2, 10},
		{"no classes: the limit", 10, 0, 0, 0.2, 10},
		{"first of two: the limit", 10, 0, 2, 0.2, 10},
		{"last of two: limit less the reserve", 10, 1, 2, 0.2, 8},
		{"exact, not a float just short", 10, 1, 2, 0.3, 7},
		{"middle of three: half the reserve", 10, 1, 3, 0.2, 9},
		{"last of three", 10, 2, 3, 0.2, 8},
		{"floor", 7, 1, 2, 0.2, 5},
		{"a class past the last is the last", 10, 5, 3, 0.2, 8},
		{"reserve 0: every class the limit", 10, 2, 3, 0, 10},
		{"reserve 90%", 20, 1, 2, 0.9, 2},
		{"small limit: the last class may get nothing", 4, 1, 2, 0.9, 0},
		{"limit 0", 0, 0, 2, 0.2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Share(tt.limit, tt.class, tt.n, tt.reserve); got != tt.want {
				t.Errorf("Share(%d, %d, %d, %v) = %d, want %d", tt.limit, tt.class, tt.n, tt.reserve, got, tt.want)
			}
		})
	}
}

func TestShareNeverIncreasesWithClass(t *testing.T) {
	for limit := 0; limit <= 50; limit++ {
		for _, reserve := range []float64{0, 0.1, 0.2, 0.5, 0.9} {
			prev := limit
			for class := 0; class < 5; class++ {
				s := Share(limit, class, 5, reserve)
				if s > prev || s < 0 {
					t.Fatalf("Share(%d, %d, 5, %v) = %d after %d", limit, class, reserve, s, prev)
				}
				prev = s
			}
		}
	}
}
