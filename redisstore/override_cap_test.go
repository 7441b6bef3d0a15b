package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestOverrideGovernsCostCap: in a zone of events 10 with overrides, an
// override of 1000 raises the cost cap with the capacity, on every
// algorithm and on every store alike (docs/algorithms.md, Cost: in a zone with
// overrides the store decides the cost cap): cost 11 is admitted with
// 989 left, cost 1001 is denied for a window with the override's 1000
// remaining and reported, and a key without an override is capped at the
// zone's own 10, without a ban.
func TestOverrideGovernsCostCap(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	stores := everyStore[overridingStore](client)
	type step struct {
		cost      int64
		allowed   bool
		remaining int64
		retry     time.Duration
		override  bool
	}
	up := algorithms.Override{Events: 1000}
	for _, alg := range allAlgorithms {
		limit := algorithms.Limit{Algorithm: alg, Events: 10, Window: time.Minute}
		for name, s := range stores {
			for _, ban := range []int32{0, 3600} {
				t.Run(fmt.Sprintf("%s/%s/ban%d", alg, name, ban), func(t *testing.T) {
					ctx := context.Background()
					key := fmt.Sprintf("ovcap:{%d}", rand.Int64())
					plain := fmt.Sprintf("ovcap:{%d}", rand.Int64())
					if err := s.SetOverrideAt(ctx, t0, key, up, 0); err != nil {
						t.Fatal(err)
					}
					req := func(k string, cost int64) algorithms.Decision {
						t.Helper()
						ds, err := s.AllowAt(ctx, t0, []algorithms.Request{{Key: k, Limit: limit, Cost: cost, Overrides: true, BanSeconds: ban}})
						if err != nil {
							t.Fatal(err)
						}
						return ds[0]
					}
					for i, st := range []struct {
						key string
						step
					}{
						{key, step{11, true, 989, 0, true}},
						{key, step{1001, false, 1000, time.Minute, true}},
						{plain, step{11, false, 10, time.Minute, false}},
						{plain, step{10, true, 0, 0, false}}, // nothing taken, no ban
					} {
						d := req(st.key, st.cost)
						if d.Allowed != st.allowed || d.Remaining != st.remaining || d.RetryAfter != st.retry ||
							d.Override.Set() != st.override || d.Banned {
							t.Errorf("step %d cost %d: got allowed=%v remaining=%d retry=%v override=%+v banned=%v, want %v %d %v override %v, not banned",
								i, st.cost, d.Allowed, d.Remaining, d.RetryAfter, d.Override, d.Banned, st.allowed, st.remaining, st.retry, st.override)
						}
					}
				})
			}
		}
	}
}

// TestNeverPassingCostOfPeriod: a cost above a calendar zone's capacity
// is told to wait what remains of the period (its window is 0), on every
// store, with and without overrides: never 0, which the headers round up
// to Retry-After: 1.
func TestNeverPassingCostOfPeriod(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	stores := everyStore[overridingStore](client)
	cal := algorithms.Calendar{Period: algorithms.PeriodDay, Location: time.UTC}
	now := time.Date(2027, 1, 15, 18, 0, 0, 0, time.UTC)
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 10, Calendar: cal, Periods: cal.PeriodsAt(now)}
	for name, s := range stores {
		for _, over := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/overrides=%v", name, over), func(t *testing.T) {
				ctx := context.Background()
				key := fmt.Sprintf("pcap:{%d}", rand.Int64())
				cost := int64(11)
				if over {
					if err := s.SetOverrideAt(ctx, now, key, algorithms.Override{Events: 20}, 0); err != nil {
						t.Fatal(err)
					}
					cost = 21
				}
				ds, err := s.AllowAt(ctx, now, []algorithms.Request{{Key: key, Limit: limit, Cost: cost, Overrides: over}})
				if err != nil {
					t.Fatal(err)
				}
				if got, want := ds[0].RetryAfter, 6*time.Hour; ds[0].Allowed || got != want {
					t.Errorf("cost %d: got allowed=%v retry=%v, want denied, retry %v (the rest of the day)", cost, ds[0].Allowed, got, want)
				}
			})
		}
	}
}
