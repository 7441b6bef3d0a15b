package algorithms

import (
	"strings"
	"testing"
	"time"
)

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := LoadTimeZone(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestMemoryPeriodExactlyN walks an injected clock through calendar
// periods across DST changes and month ends: the memory store admits
// exactly events per period, starts over at the period's first instant
// (not a microsecond before), and a denial's retry, more and reset are the
// time to the period's end.
func TestMemoryPeriodExactlyN(t *testing.T) {
	ny, berlin := mustLoad(t, "America/New_York"), mustLoad(t, "Europe/Berlin")
	tests := []struct {
		name     string
		calendar Calendar
		from, to time.Time
		step     time.Duration
		lengths  []time.Duration // of the periods begun in [from, to), in order
	}{
		{"day New_York spring forward", Calendar{PeriodDay, ny},
			time.Date(2026, 3, 7, 0, 0, 0, 0, ny), time.Date(2026, 3, 10, 0, 0, 0, 0, ny), 7 * time.Minute,
			[]time.Duration{24 * time.Hour, 23 * time.Hour, 24 * time.Hour}},
		{"day New_York fall back", Calendar{PeriodDay, ny},
			time.Date(2026, 10, 31, 0, 0, 0, 0, ny), time.Date(2026, 11, 3, 0, 0, 0, 0, ny), 7 * time.Minute,
			[]time.Duration{24 * time.Hour, 25 * time.Hour, 24 * time.Hour}},
		{"month Berlin end of March (DST) and February (leap year)", Calendar{PeriodMonth, berlin},
			time.Date(2028, 2, 1, 0, 0, 0, 0, berlin), time.Date(2028, 5, 1, 0, 0, 0, 0, berlin), 5 * time.Hour,
			[]time.Duration{29 * 24 * time.Hour, (31*24 - 1) * time.Hour, 30 * 24 * time.Hour}},
		{"week Berlin across the October change", Calendar{PeriodWeek, berlin},
			time.Date(2026, 10, 19, 0, 0, 0, 0, berlin), time.Date(2026, 11, 2, 0, 0, 0, 0, berlin), 3 * time.Hour,
			[]time.Duration{(7*24 + 1) * time.Hour, 7 * 24 * time.Hour}},
	}
	const events = 5
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMemoryStore()
			admitted := map[int64]int{} // period start → admitted
			var starts []int64
			for now := tt.from; now.Before(tt.to); now = now.Add(tt.step) {
				limit := Limit{Algorithm: FixedWindow, Events: events, Calendar: tt.calendar, Periods: tt.calendar.PeriodsAt(now)}
				start, end := tt.calendar.BoundsAt(now)
				if _, seen := admitted[start.UnixMicro()]; !seen {
					starts = append(starts, start.UnixMicro())
					admitted[start.UnixMicro()] = 0
				}
				for range 2 { // more demand than events over a period
					d := m.AllowAt(now, []Request{{Key: "k", Limit: limit, Cost: 1}})[0]
					left := end.Sub(now)
					if d.Allowed {
						admitted[start.UnixMicro()]++
					} else if d.RetryAfter != left {
						t.Fatalf("%v: denied with retry %v, want %v (to %v)", now, d.RetryAfter, left, end)
					}
					if d.MoreAfter != left || d.ResetAfter != left {
						t.Fatalf("%v: more %v reset %v, want %v", now, d.MoreAfter, d.ResetAfter, left)
					}
				}
			}
			if len(starts) != len(tt.lengths) {
				t.Fatalf("%d periods, want %d", len(starts), len(tt.lengths))
			}
			for i, s := range starts {
				if admitted[s] != events {
					t.Errorf("period from %v: %d admitted, want %d", time.UnixMicro(s).In(tt.calendar.Location), admitted[s], events)
				}
				_, end := tt.calendar.BoundsAt(time.UnixMicro(s))
				if got := end.Sub(time.UnixMicro(s)); got != tt.lengths[i] {
					t.Errorf("period from %v lasts %v, want %v", time.UnixMicro(s), got, tt.lengths[i])
				}
			}
		})
	}
}

// TestMemoryPeriodStartsOverAtLocalMidnight: a key that spent its day is
// denied a microsecond before local midnight and whole at midnight, with
// the Periods the caller computed before midnight (its clock a little
// behind the store's).
func TestMemoryPeriodStartsOverAtLocalMidnight(t *testing.T) {
	ny := mustLoad(t, "America/New_York")
	c := Calendar{PeriodDay, ny}
	midnight := time.Date(2026, 3, 9, 0, 0, 0, 0, ny) // after a 23-hour day
	before := midnight.Add(-time.Microsecond)
	limit := Limit{Algorithm: FixedWindow, Events: 2, Calendar: c, Periods: c.PeriodsAt(before)}
	m := NewMemoryStore()
	r := []Request{{Key: "k", Limit: limit, Cost: 2}}
	if d := m.AllowAt(midnight.Add(-23*time.Hour), r)[0]; !d.Allowed || d.Remaining != 0 {
		t.Fatalf("first: %+v", d)
	}
	if d := m.AllowAt(before, r)[0]; d.Allowed || d.RetryAfter != time.Microsecond {
		t.Fatalf("before midnight: %+v, want denied for 1µs", d)
	}
	if d := m.AllowAt(midnight, r)[0]; !d.Allowed || d.MoreAfter != 24*time.Hour {
		t.Fatalf("at midnight: %+v, want admitted, 24h to the next", d)
	}
}

// TestMemoryPeriodSettle: a refund goes back to the reservation's period
// only.
func TestMemoryPeriodSettle(t *testing.T) {
	c := Calendar{Period: PeriodDay}
	day := time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC)
	limit := Limit{Algorithm: FixedWindow, Events: 3, Calendar: c, Periods: c.PeriodsAt(day)}
	m := NewMemoryStore()
	d := m.AllowAt(day, []Request{{Key: "k", Limit: limit, Cost: 3}})[0]
	m.SettleAt(day.Add(time.Hour), []Settlement{{Key: "k", Limit: limit, At: d.At, Delta: -2}})
	if got := m.PeekAt(day.Add(time.Hour), []Request{{Key: "k", Limit: limit, Cost: 1}})[0]; got.Remaining != 2 {
		t.Fatalf("after a refund of 2: remaining %d, want 2", got.Remaining)
	}
	next := day.Add(24 * time.Hour)
	nextLimit := limit
	nextLimit.Periods = c.PeriodsAt(next)
	d2 := m.AllowAt(next, []Request{{Key: "k", Limit: nextLimit, Cost: 3}})[0]
	m.SettleAt(next, []Settlement{{Key: "k", Limit: limit, At: d.At, Delta: -3}}) // yesterday's: nothing
	if got := m.PeekAt(next, []Request{{Key: "k", Limit: nextLimit, Cost: 1}})[0]; !d2.Allowed || got.Remaining != 0 {
		t.Fatalf("a refund of yesterday's reservation changed today's count: remaining %d", got.Remaining)
	}
}

func TestLimitValidatePeriod(t *testing.T) {
	berlin := mustLoad(t, "Europe/Berlin")
	month := Calendar{PeriodMonth, berlin}
	for _, tt := range []struct {
		limit Limit
		want  string
	}{
		{Limit{Algorithm: FixedWindow, Events: 100_000, Calendar: month}, ""},
		{Limit{Algorithm: SlidingWindow, Events: 5, Calendar: month}, "period"},
		{Limit{Algorithm: TokenBucket, Events: 5, Calendar: month}, "period"},
		{Limit{Algorithm: FixedWindow, Events: 5, Window: time.Hour, Calendar: month}, "window"},
		{Limit{Algorithm: FixedWindow, Events: 0, Calendar: month}, "events"},
		{Limit{Algorithm: FixedWindow, Events: 5, Calendar: Calendar{Period: 9}}, "period"},
	} {
		err := tt.limit.Validate()
		if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%v: got %v, want an error naming %q", tt.limit, err, tt.want)
		}
	}
	if got, want := (Limit{Algorithm: FixedWindow, Events: 7, Calendar: month}).String(), "fixed_window 7 per month in Europe/Berlin"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// TestDenyCachePeriod: a cached denial of a period zone ends at the
// period's end, and a request carrying the next period's boundaries (its
// caller's clock passed midnight) is never answered by it.
func TestDenyCachePeriod(t *testing.T) {
	c := Calendar{Period: PeriodDay}
	now := time.Date(2026, 6, 10, 23, 0, 0, 0, time.UTC)
	limit := Limit{Algorithm: FixedWindow, Events: 1, Calendar: c, Periods: c.PeriodsAt(now)}
	m := NewMemoryStore()
	cache := NewDenyCacheOf(m, 16)
	reqs := []Request{{Key: "k", Limit: limit, Cost: 1}}
	m.AllowAt(now, reqs)
	ds := m.AllowAt(now, reqs)
	if ds[0].Allowed || ds[0].RetryAfter != time.Hour {
		t.Fatalf("second request: %+v, want denied for an hour", ds[0])
	}
	cache.RememberAt(now, reqs, ds)
	if got := cache.CachedAt(now.Add(59*time.Minute), reqs); got == nil || got[0].RetryAfter != time.Minute {
		t.Fatalf("cached 59 minutes later: %+v, want a denial for a minute", got)
	}
	if got := cache.CachedAt(now.Add(time.Hour), reqs); got != nil {
		t.Fatalf("cached at midnight: %+v, want none", got)
	}
	cache.RememberAt(now, reqs, ds)
	next := []Request{{Key: "k", Limit: Limit{Algorithm: FixedWindow, Events: 1, Calendar: c, Periods: c.PeriodsAt(now.Add(time.Hour))}, Cost: 1}}
	if got := cache.CachedAt(now.Add(30*time.Minute), next); got != nil {
		t.Fatalf("a request with the next day's periods answered from the cache: %+v", got)
	}
}
