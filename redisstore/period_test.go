package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// periodStep is one request of a calendar zone's step table: at is the
// store's clock (the script's optional now), skew how far the caller's
// clock (the Periods it sends) is from it.
type periodStep struct {
	at        time.Time
	skew      time.Duration
	cost      int64
	allowed   bool
	remaining int64
	left      time.Duration // until the period's end: retry when denied, more and reset once used
	err       bool          // the store's clock is outside the caller's periods
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := algorithms.LoadTimeZone(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// local is a wall clock reading in loc.
func local(loc *time.Location, y int, m time.Month, d, h, min, s int) time.Time {
	return time.Date(y, m, d, h, min, s, 0, loc)
}

// TestPeriodSteps: a calendar zone admits exactly events per period and
// starts over at the period's local start, across a DST change (a day of
// 23 hours in America/New_York) and a month end (Europe/Berlin, a March
// of 743 hours), on both stores; on Redis the script picks the period of
// its own clock within the caller's periods, and refuses beyond them.
func TestPeriodSteps(t *testing.T) {
	ny, berlin := mustZone(t, "America/New_York"), mustZone(t, "Europe/Berlin")
	tests := []struct {
		name      string
		calendar  algorithms.Calendar
		redisOnly bool
		steps     []periodStep
	}{
		{"day/America/New_York/spring_forward", algorithms.Calendar{Period: algorithms.PeriodDay, Location: ny}, false, []periodStep{
			{at: local(ny, 2026, 3, 8, 0, 0, 0), cost: 1, allowed: true, remaining: 2, left: 23 * time.Hour},
			{at: local(ny, 2026, 3, 8, 1, 59, 59), cost: 2, allowed: true, remaining: 0, left: 21*time.Hour + time.Second},
			// 3:00 EDT follows 1:59:59 EST: the day has 23 hours
			{at: local(ny, 2026, 3, 8, 3, 0, 0), cost: 1, allowed: false, remaining: 0, left: 21 * time.Hour},
			{at: local(ny, 2026, 3, 8, 23, 59, 59), cost: 1, allowed: false, remaining: 0, left: time.Second},
			// local midnight: the count starts over, the day has 24 hours
			{at: local(ny, 2026, 3, 9, 0, 0, 0), cost: 3, allowed: true, remaining: 0, left: 24 * time.Hour},
			{at: local(ny, 2026, 3, 9, 0, 0, 1), cost: 1, allowed: false, remaining: 0, left: 24*time.Hour - time.Second},
		}},
		{"day/America/New_York/fall_back", algorithms.Calendar{Period: algorithms.PeriodDay, Location: ny}, false, []periodStep{
			{at: local(ny, 2026, 10, 31, 23, 0, 0), cost: 3, allowed: true, remaining: 0, left: time.Hour},
			{at: local(ny, 2026, 11, 1, 0, 0, 0), cost: 3, allowed: true, remaining: 0, left: 25 * time.Hour},
			{at: local(ny, 2026, 11, 1, 12, 0, 0), cost: 1, allowed: false, remaining: 0, left: 12 * time.Hour},
		}},
		{"month/Europe/Berlin", algorithms.Calendar{Period: algorithms.PeriodMonth, Location: berlin}, false, []periodStep{
			{at: local(berlin, 2026, 3, 1, 0, 0, 0), cost: 2, allowed: true, remaining: 1, left: (31*24 - 1) * time.Hour},
			{at: local(berlin, 2026, 3, 31, 23, 59, 59), cost: 1, allowed: true, remaining: 0, left: time.Second},
			{at: local(berlin, 2026, 3, 31, 23, 59, 59), cost: 1, allowed: false, remaining: 0, left: time.Second},
			// the 1st, local midnight (22:00 UTC): April's whole quota
			{at: local(berlin, 2026, 4, 1, 0, 0, 0), cost: 3, allowed: true, remaining: 0, left: 30 * 24 * time.Hour},
			{at: local(berlin, 2026, 4, 30, 23, 0, 0), cost: 1, allowed: false, remaining: 0, left: time.Hour},
			{at: local(berlin, 2026, 5, 1, 0, 0, 0), cost: 1, allowed: true, remaining: 2, left: 31 * 24 * time.Hour},
		}},
		{"day/UTC/skew", algorithms.Calendar{Period: algorithms.PeriodDay}, true, []periodStep{
			// a caller 20 hours ahead sends the next day as current: Redis
			// counts in its own day
			{at: time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC), skew: 20 * time.Hour, cost: 3, allowed: true, remaining: 0, left: 12 * time.Hour},
			// a caller 20 hours behind: the same day, its next
			{at: time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC), skew: -20 * time.Hour, cost: 1, allowed: false, remaining: 0, left: 12 * time.Hour},
			{at: time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC), cost: 1, allowed: false, remaining: 0, left: 12 * time.Hour},
			// beyond the caller's periods: an error, nothing counted
			{at: time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC), skew: 37 * time.Hour, cost: 1, err: true},
			{at: time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC), skew: -37 * time.Hour, cost: 1, err: true},
			{at: time.Date(2026, 6, 11, 0, 0, 0, 0, time.UTC), skew: -24*time.Hour - time.Microsecond, cost: 1, err: true},
			{at: time.Date(2026, 6, 11, 0, 0, 0, 0, time.UTC), skew: -24 * time.Hour, cost: 3, allowed: true, remaining: 0, left: 24 * time.Hour},
		}},
	}
	for name, store := range stores(t) {
		for _, tt := range tests {
			if tt.redisOnly && name != "redis" {
				continue
			}
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				key := fmt.Sprintf("period:%s:%d", tt.name, rand.Int64())
				for i, st := range tt.steps {
					limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 3, Calendar: tt.calendar,
						Periods: tt.calendar.PeriodsAt(st.at.Add(st.skew))}
					ds, err := store.AllowAt(context.Background(), st.at, []algorithms.Request{{Key: key, Limit: limit, Cost: st.cost}})
					if st.err {
						if !errors.Is(err, algorithms.ErrClockSkew) {
							t.Fatalf("step %d: got %v, %v; want ErrClockSkew", i, ds, err)
						}
						continue
					}
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					d := ds[0]
					if d.Allowed != st.allowed || d.Remaining != st.remaining {
						t.Fatalf("step %d: got allowed %v remaining %d, want %v %d", i, d.Allowed, d.Remaining, st.allowed, st.remaining)
					}
					if d.MoreAfter != st.left || d.ResetAfter != st.left {
						t.Fatalf("step %d: more %v reset %v, want %v", i, d.MoreAfter, d.ResetAfter, st.left)
					}
					if !d.Allowed && d.RetryAfter != st.left {
						t.Fatalf("step %d: retry %v, want %v", i, d.RetryAfter, st.left)
					}
				}
			})
		}
	}
}

// TestPeriodMemoryMatchesRedis: on random walks through calendar periods,
// the memory store and the script decide alike, settlements included.
func TestPeriodMemoryMatchesRedis(t *testing.T) {
	ny, berlin, apia := mustZone(t, "America/New_York"), mustZone(t, "Europe/Berlin"), mustZone(t, "Pacific/Apia")
	calendars := []struct {
		c    algorithms.Calendar
		from time.Time
		step time.Duration
	}{
		{algorithms.Calendar{Period: algorithms.PeriodDay, Location: ny}, local(ny, 2026, 3, 6, 0, 0, 0), 2 * time.Hour},
		{algorithms.Calendar{Period: algorithms.PeriodDay, Location: apia}, time.Date(2011, 12, 28, 0, 0, 0, 0, time.UTC), 2 * time.Hour},
		{algorithms.Calendar{Period: algorithms.PeriodWeek, Location: berlin}, local(berlin, 2026, 10, 20, 0, 0, 0), 12 * time.Hour},
		{algorithms.Calendar{Period: algorithms.PeriodMonth, Location: berlin}, local(berlin, 2026, 2, 20, 0, 0, 0), 36 * time.Hour},
		{algorithms.Calendar{Period: algorithms.PeriodYear}, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), 72 * time.Hour},
	}
	s := stores(t)
	memory, redisStore := s["memory"], s["redis"].(*Store)
	m := memory.(memoryAt).MemoryStore
	rng := rand.New(rand.NewPCG(3, 4))
	for _, cal := range calendars {
		t.Run(fmt.Sprintf("%s/%s", cal.c.Period, cal.c.Location), func(t *testing.T) {
			prefix := fmt.Sprintf("pdiff:%d:", rng.Int64())
			now := cal.from
			for i := range 300 {
				now = now.Add(time.Duration(rng.Int64N(int64(cal.step))).Truncate(time.Microsecond))
				limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 7, Calendar: cal.c, Periods: cal.c.PeriodsAt(now)}
				reqs := []algorithms.Request{{Key: prefix + fmt.Sprint(rng.IntN(3)), Limit: limit, Cost: randomCost(rng, 7)}}
				want, _ := memory.AllowAt(context.Background(), now, reqs)
				got, err := redisStore.AllowAt(context.Background(), now, reqs)
				if err != nil {
					t.Fatal(err)
				}
				if got[0] != want[0] {
					t.Fatalf("step %d at %v (%s, cost %d): redis %+v, memory %+v", i, now, reqs[0].Key, reqs[0].Cost, got[0], want[0])
				}
				if got[0].Allowed && rng.IntN(4) == 0 { // refund part of it, or take more
					st := []algorithms.Settlement{{Key: reqs[0].Key, Limit: limit, At: got[0].At, Delta: rng.Int64N(5) - 3}}
					m.SettleAt(now, st)
					if err := redisStore.SettleAt(context.Background(), now, st); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}
