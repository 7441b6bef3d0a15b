package algorithms_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// TestOverCapacity: a cost above its zone's capacity is answered without
// the store when the zone is enforced; when only dry-run zones are over,
// the store decides the others and the answers keep their order.
func TestOverCapacity(t *testing.T) {
	small := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 5, Window: time.Minute}
	big := algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 10, Window: time.Second, Burst: 20}
	fits := algorithms.Request{Key: "fits", Limit: big, Cost: 20}
	over := algorithms.Request{Key: "over", Limit: small, Cost: 6}
	overDry := algorithms.Request{Key: "over-dry", Limit: small, Cost: 6, DryRun: true}
	fromStore := algorithms.Decision{Allowed: true, Remaining: 7, At: 42}
	tests := []struct {
		name       string
		reqs       []algorithms.Request
		wantOK     bool
		wantStore  int // requests passed to the store
		wantAllow  []bool
		wantRemain []int64
	}{
		{"every cost fits", []algorithms.Request{fits}, false, 0, nil, nil},
		{"enforced zone over", []algorithms.Request{fits, over}, true, 0, []bool{true, false}, []int64{20, 5}},
		{"dry-run zone over", []algorithms.Request{overDry, fits}, true, 1, []bool{false, true}, []int64{5, 7}},
		{"only dry-run zones", []algorithms.Request{overDry}, true, 0, []bool{false}, []int64{5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stored := 0
			ds, ok, err := algorithms.OverCapacityAt(0, tt.reqs, func(fit []algorithms.Request) ([]algorithms.Decision, error) {
				stored += len(fit)
				ds := make([]algorithms.Decision, len(fit))
				for i := range ds {
					ds[i] = fromStore
				}
				return ds, nil
			})
			if err != nil || ok != tt.wantOK || stored != tt.wantStore {
				t.Fatalf("got ok %v, %d to the store, error %v; want ok %v, %d to the store", ok, stored, err, tt.wantOK, tt.wantStore)
			}
			for i, d := range ds {
				if d.Allowed != tt.wantAllow[i] || d.Remaining != tt.wantRemain[i] {
					t.Errorf("zone %d: got allowed %v remaining %d, want %v %d", i, d.Allowed, d.Remaining, tt.wantAllow[i], tt.wantRemain[i])
				}
				if !d.Allowed && d.RetryAfter != tt.reqs[i].Limit.Window {
					t.Errorf("zone %d: got RetryAfter %v, want the window %v", i, d.RetryAfter, tt.reqs[i].Limit.Window)
				}
			}
		})
	}
	t.Run("store error", func(t *testing.T) {
		boom := errors.New("boom")
		_, ok, err := algorithms.OverCapacityAt(0, []algorithms.Request{overDry, fits}, func([]algorithms.Request) ([]algorithms.Decision, error) {
			return nil, boom
		})
		if !ok || !errors.Is(err, boom) {
			t.Errorf("got ok %v, error %v; want true, the store's error", ok, err)
		}
	})
}

// TestNeverRetryAt: a cost that can never pass waits a window, or on a
// calendar zone what remains of the period holding now (from the request's
// Periods, else its Calendar), never 0.
func TestNeverRetryAt(t *testing.T) {
	cal := algorithms.Calendar{Period: algorithms.PeriodDay, Location: time.UTC}
	now := time.Date(2027, 1, 15, 18, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		limit algorithms.Limit
		want  time.Duration
	}{
		{"window", algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 5, Window: time.Minute}, time.Minute},
		{"period", algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 5, Calendar: cal, Periods: cal.PeriodsAt(now)}, 6 * time.Hour},
		{"period without its periods", algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 5, Calendar: cal}, 6 * time.Hour},
	}
	for _, tt := range tests {
		if got := tt.limit.NeverRetryAt(now.UnixMicro()); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}
