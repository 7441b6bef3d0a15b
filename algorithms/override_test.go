package algorithms

import (
	"context"
	"testing"
	"time"
)

// TestDenyCacheSkipsOverrides: a request of a zone with overrides is never
// answered from the cache, so an override raised elsewhere applies at its
// next request; a plain request's denial is cached.
func TestDenyCacheSkipsOverrides(t *testing.T) {
	ctx := context.Background()
	mem := NewMemoryStore()
	c := NewDenyCache(mem)
	limit := Limit{Algorithm: FixedWindow, Events: 1, Window: time.Hour}
	for _, overrides := range []bool{false, true} {
		reqs := []Request{{Key: "k" + map[bool]string{false: "plain", true: "ov"}[overrides], Limit: limit, Cost: 1, Overrides: overrides}}
		for range 2 {
			if _, err := c.Allow(ctx, reqs); err != nil {
				t.Fatal(err)
			}
		}
		cached := c.Cached(reqs) != nil
		if cached == overrides {
			t.Errorf("overrides=%v: cached=%v", overrides, cached)
		}
		if overrides {
			if err := c.SetOverride(ctx, reqs[0].Key, Override{Events: 5}, 0); err != nil {
				t.Fatal(err)
			}
			ds, _ := c.Allow(ctx, reqs)
			if !ds[0].Allowed || ds[0].Override != (Override{Events: 5, Burst: 5}) || ds[0].Cached {
				t.Errorf("after a raise: got %+v, want admitted by the override from the store", ds[0])
			}
		}
	}
}

func TestOverrideValidate(t *testing.T) {
	tb := Limit{Algorithm: TokenBucket, Events: 10, Window: time.Second}
	log := Limit{Algorithm: SlidingLog, Events: 10, Window: time.Second}
	for _, tt := range []struct {
		o     Override
		l     Limit
		valid bool
	}{
		{Override{Events: 5}, tb, true},
		{Override{Events: 5, Burst: 50}, tb, true},
		{Override{Events: 5, Burst: 50}, log, false}, // burst only on token_bucket
		{Override{Events: 20_000}, log, false},       // sliding_log at most 10,000
		{Override{Events: 0}, tb, false},
		{Override{Events: 5, Burst: -1}, tb, false},
	} {
		if err := tt.o.Validate(tt.l); (err == nil) != tt.valid {
			t.Errorf("%+v on %v: err %v, want valid=%v", tt.o, tt.l, err, tt.valid)
		}
	}
	if _, err := NewOverride(MaxEvents+1, 0); err == nil {
		t.Error("NewOverride(10^9+1): no error")
	}
}
