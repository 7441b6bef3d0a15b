package algorithms

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// periodCase is one instant and the period that must hold it. Instants are
// RFC 3339 with the zone's offset, so each case reads as a wall clock.
type periodCase struct {
	name       string
	zone       string
	period     Period
	now        string
	start, end string
	length     time.Duration
}

var periodCases = []periodCase{
	// Days across both DST changes, and the µs on either side of midnight.
	{"NY day spring forward", "America/New_York", PeriodDay, "2026-03-08T12:00:00-04:00", "2026-03-08T00:00:00-05:00", "2026-03-09T00:00:00-04:00", 23 * time.Hour},
	{"NY day spring forward, last µs", "America/New_York", PeriodDay, "2026-03-08T23:59:59.999999-04:00", "2026-03-08T00:00:00-05:00", "2026-03-09T00:00:00-04:00", 23 * time.Hour},
	{"NY day after, first µs", "America/New_York", PeriodDay, "2026-03-09T00:00:00-04:00", "2026-03-09T00:00:00-04:00", "2026-03-10T00:00:00-04:00", 24 * time.Hour},
	{"NY day before, last µs", "America/New_York", PeriodDay, "2026-03-07T23:59:59.999999-05:00", "2026-03-07T00:00:00-05:00", "2026-03-08T00:00:00-05:00", 24 * time.Hour},
	{"NY day fall back, first 01:30", "America/New_York", PeriodDay, "2026-11-01T01:30:00-04:00", "2026-11-01T00:00:00-04:00", "2026-11-02T00:00:00-05:00", 25 * time.Hour},
	{"NY day fall back, second 01:30", "America/New_York", PeriodDay, "2026-11-01T01:30:00-05:00", "2026-11-01T00:00:00-04:00", "2026-11-02T00:00:00-05:00", 25 * time.Hour},
	{"Berlin day spring forward", "Europe/Berlin", PeriodDay, "2026-03-29T03:00:00+02:00", "2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00", 23 * time.Hour},
	{"Berlin day spring forward, last µs of CET", "Europe/Berlin", PeriodDay, "2026-03-29T01:59:59.999999+01:00", "2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00", 23 * time.Hour},
	{"Berlin day fall back, first 02:30", "Europe/Berlin", PeriodDay, "2026-10-25T02:30:00+02:00", "2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00", 25 * time.Hour},
	{"Berlin day fall back, second 02:30", "Europe/Berlin", PeriodDay, "2026-10-25T02:30:00+01:00", "2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00", 25 * time.Hour},
	{"Berlin day fall back, last µs", "Europe/Berlin", PeriodDay, "2026-10-25T23:59:59.999999+01:00", "2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00", 25 * time.Hour},
	// Clock changes at midnight: the day starts when the clock reads it.
	{"Havana midnight skipped", "America/Havana", PeriodDay, "2026-03-08T12:00:00-04:00", "2026-03-08T01:00:00-04:00", "2026-03-09T00:00:00-04:00", 23 * time.Hour},
	{"Havana day before skipped midnight, last µs", "America/Havana", PeriodDay, "2026-03-07T23:59:59.999999-05:00", "2026-03-07T00:00:00-05:00", "2026-03-08T01:00:00-04:00", 24 * time.Hour},
	{"Havana midnight repeated, first 00:30", "America/Havana", PeriodDay, "2026-11-01T00:30:00-04:00", "2026-11-01T00:00:00-04:00", "2026-11-02T00:00:00-05:00", 25 * time.Hour},
	{"Havana midnight repeated, second 00:30", "America/Havana", PeriodDay, "2026-11-01T00:30:00-05:00", "2026-11-01T00:00:00-04:00", "2026-11-02T00:00:00-05:00", 25 * time.Hour},
	{"Havana day before repeated midnight", "America/Havana", PeriodDay, "2026-10-31T23:59:59.999999-04:00", "2026-10-31T00:00:00-04:00", "2026-11-01T00:00:00-04:00", 24 * time.Hour},
	{"Santiago midnight skipped", "America/Santiago", PeriodDay, "2022-09-11T12:00:00-03:00", "2022-09-11T01:00:00-03:00", "2022-09-12T00:00:00-03:00", 23 * time.Hour},
	{"Santiago 23:00 repeated", "America/Santiago", PeriodDay, "2023-04-01T23:30:00-04:00", "2023-04-01T00:00:00-03:00", "2023-04-02T00:00:00-04:00", 25 * time.Hour},
	{"Beirut midnight skipped", "Asia/Beirut", PeriodDay, "2026-03-29T12:00:00+03:00", "2026-03-29T01:00:00+03:00", "2026-03-30T00:00:00+03:00", 23 * time.Hour},
	{"Beirut month of a skipped midnight", "Asia/Beirut", PeriodMonth, "2026-03-29T12:00:00+03:00", "2026-03-01T00:00:00+02:00", "2026-04-01T00:00:00+03:00", 743 * time.Hour},
	// Half-hour DST.
	{"Lord Howe day DST ends", "Australia/Lord_Howe", PeriodDay, "2026-04-05T12:00:00+10:30", "2026-04-05T00:00:00+11:00", "2026-04-06T00:00:00+10:30", 24*time.Hour + 30*time.Minute},
	{"Lord Howe day DST starts", "Australia/Lord_Howe", PeriodDay, "2026-10-04T12:00:00+11:00", "2026-10-04T00:00:00+10:30", "2026-10-05T00:00:00+11:00", 23*time.Hour + 30*time.Minute},
	// ISO weeks.
	{"week across a year", "UTC", PeriodWeek, "2026-12-31T12:00:00Z", "2026-12-28T00:00:00Z", "2027-01-04T00:00:00Z", 168 * time.Hour},
	{"week, last µs of Sunday", "UTC", PeriodWeek, "2027-01-03T23:59:59.999999Z", "2026-12-28T00:00:00Z", "2027-01-04T00:00:00Z", 168 * time.Hour},
	{"week, first µs of Monday", "UTC", PeriodWeek, "2027-01-04T00:00:00Z", "2027-01-04T00:00:00Z", "2027-01-11T00:00:00Z", 168 * time.Hour},
	{"Berlin week with spring forward", "Europe/Berlin", PeriodWeek, "2026-03-25T12:00:00+01:00", "2026-03-23T00:00:00+01:00", "2026-03-30T00:00:00+02:00", 167 * time.Hour},
	{"Berlin week with fall back", "Europe/Berlin", PeriodWeek, "2026-10-25T02:30:00+01:00", "2026-10-19T00:00:00+02:00", "2026-10-26T00:00:00+01:00", 169 * time.Hour},
	// Months of 28, 29, 30 and 31 days.
	{"month of 28 days", "UTC", PeriodMonth, "2026-02-14T00:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", 28 * 24 * time.Hour},
	{"month of 29 days, last µs", "Europe/Berlin", PeriodMonth, "2028-02-29T23:59:59.999999+01:00", "2028-02-01T00:00:00+01:00", "2028-03-01T00:00:00+01:00", 29 * 24 * time.Hour},
	{"month of 30 days", "Asia/Tokyo", PeriodMonth, "2026-04-15T09:00:00+09:00", "2026-04-01T00:00:00+09:00", "2026-05-01T00:00:00+09:00", 30 * 24 * time.Hour},
	{"month of 31 days, last µs", "America/New_York", PeriodMonth, "2026-01-31T23:59:59.999999-05:00", "2026-01-01T00:00:00-05:00", "2026-02-01T00:00:00-05:00", 31 * 24 * time.Hour},
	{"month, first µs", "America/New_York", PeriodMonth, "2026-02-01T00:00:00-05:00", "2026-02-01T00:00:00-05:00", "2026-03-01T00:00:00-05:00", 28 * 24 * time.Hour},
	{"NY month with spring forward", "America/New_York", PeriodMonth, "2026-03-31T23:59:59.999999-04:00", "2026-03-01T00:00:00-05:00", "2026-04-01T00:00:00-04:00", 743 * time.Hour},
	{"NY month with fall back", "America/New_York", PeriodMonth, "2026-11-01T01:30:00-05:00", "2026-11-01T00:00:00-04:00", "2026-12-01T00:00:00-05:00", 721 * time.Hour},
	// Years.
	{"year", "UTC", PeriodYear, "2026-07-01T00:00:00Z", "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z", 365 * 24 * time.Hour},
	{"leap year", "Europe/Berlin", PeriodYear, "2028-06-01T00:00:00+02:00", "2028-01-01T00:00:00+01:00", "2029-01-01T00:00:00+01:00", 366 * 24 * time.Hour},
	{"year, last µs", "Europe/Berlin", PeriodYear, "2026-12-31T23:59:59.999999+01:00", "2026-01-01T00:00:00+01:00", "2027-01-01T00:00:00+01:00", 365 * 24 * time.Hour},
	{"year, first µs", "Europe/Berlin", PeriodYear, "2027-01-01T00:00:00+01:00", "2027-01-01T00:00:00+01:00", "2028-01-01T00:00:00+01:00", 365 * 24 * time.Hour},
	// The last day of a leap year after the table of clock changes (Go's
	// ZoneBounds ends a day early there: golang/go#81583).
	{"NY day, leap year's last day, TZ rule", "America/New_York", PeriodDay, "2040-12-31T12:00:00-05:00", "2040-12-31T00:00:00-05:00", "2041-01-01T00:00:00-05:00", 24 * time.Hour},
	{"NY leap year, last µs, TZ rule", "America/New_York", PeriodYear, "2040-12-31T23:59:59.999999-05:00", "2040-01-01T00:00:00-05:00", "2041-01-01T00:00:00-05:00", 366 * 24 * time.Hour},
	{"Sydney week across a leap year, TZ rule", "Australia/Sydney", PeriodWeek, "2040-12-31T12:00:00+11:00", "2040-12-31T00:00:00+11:00", "2041-01-07T00:00:00+11:00", 168 * time.Hour},
	// Samoa skipped Friday 30 December 2011 (from −10 to +14).
	{"Apia day before the skip, last µs", "Pacific/Apia", PeriodDay, "2011-12-29T23:59:59.999999-10:00", "2011-12-29T00:00:00-10:00", "2011-12-31T00:00:00+14:00", 24 * time.Hour},
	{"Apia day after the skip, first µs", "Pacific/Apia", PeriodDay, "2011-12-31T00:00:00+14:00", "2011-12-31T00:00:00+14:00", "2012-01-01T00:00:00+14:00", 24 * time.Hour},
	{"Apia week of the skip", "Pacific/Apia", PeriodWeek, "2011-12-31T12:00:00+14:00", "2011-12-26T00:00:00-10:00", "2012-01-02T00:00:00+14:00", 144 * time.Hour},
	{"Apia month of the skip", "Pacific/Apia", PeriodMonth, "2011-12-29T12:00:00-10:00", "2011-12-01T00:00:00-10:00", "2012-01-01T00:00:00+14:00", 30 * 24 * time.Hour},
	{"Apia year of the skip", "Pacific/Apia", PeriodYear, "2011-06-01T00:00:00-11:00", "2011-01-01T00:00:00-10:00", "2012-01-01T00:00:00+14:00", 364 * 24 * time.Hour},
	{"Fakaofo day before the skip", "Pacific/Fakaofo", PeriodDay, "2011-12-29T12:00:00-11:00", "2011-12-29T00:00:00-11:00", "2011-12-31T00:00:00+13:00", 24 * time.Hour},
	// Manila skipped 31 December 1844 (local mean times −15:56:08 and
	// +8:03:52: written in UTC).
	{"Manila day before the skip", "Asia/Manila", PeriodDay, "1844-12-31T12:00:00Z", "1844-12-30T15:56:08Z", "1844-12-31T15:56:08Z", 24 * time.Hour},
	// Sitka went back from 19 to 18 October 1867 (+14:58:47 to −9:01:13):
	// the second 18 October stays in the 19th's period, 48 hours long.
	{"Sitka date repeated", "America/Sitka", PeriodDay, "1867-10-19T03:00:00Z", "1867-10-18T09:01:13Z", "1867-10-20T09:01:13Z", 48 * time.Hour},
}

func TestPeriodBoundsAt(t *testing.T) {
	for _, tc := range periodCases {
		t.Run(tc.name, func(t *testing.T) {
			c := Calendar{tc.period, periodLoad(t, tc.zone)}
			start, end := c.BoundsAt(periodTime(t, tc.now))
			if want := periodTime(t, tc.start); !start.Equal(want) {
				t.Errorf("start = %v, want %v", start, want)
			}
			if want := periodTime(t, tc.end); !end.Equal(want) {
				t.Errorf("end = %v, want %v", end, want)
			}
			if got := end.Sub(start); got != tc.length {
				t.Errorf("length = %v, want %v", got, tc.length)
			}
			if start.Location() != c.Location || end.Location() != c.Location {
				t.Errorf("bounds in %v and %v, want %v", start.Location(), end.Location(), c.Location)
			}
			checkPeriod(t, c, periodTime(t, tc.now))
		})
	}
}

func TestPeriodNilLocationIsUTC(t *testing.T) {
	now := time.Date(2026, 12, 31, 23, 0, 0, 0, time.UTC)
	gotS, gotE := Calendar{Period: PeriodMonth}.BoundsAt(now)
	wantS, wantE := Calendar{PeriodMonth, time.UTC}.BoundsAt(now)
	if !gotS.Equal(wantS) || !gotE.Equal(wantE) {
		t.Errorf("nil Location: [%v, %v), want [%v, %v)", gotS, gotE, wantS, wantE)
	}
}

// periodZones are the zones of the property test: ordinary DST, clock
// changes at midnight, half-hour and 45-minute offsets, 2-hour DST
// (Troll), negative DST (Dublin), Ramadan DST (Casablanca), skipped dates
// (Apia, Fakaofo, Kanton, Kwajalein, Manila) and a repeated one (Sitka).
var periodZones = []string{
	"UTC", "America/New_York", "Europe/Berlin", "America/Havana",
	"America/Santiago", "Asia/Beirut", "Pacific/Apia", "Pacific/Fakaofo",
	"Pacific/Kanton", "Pacific/Kwajalein", "Australia/Lord_Howe",
	"Antarctica/Troll", "Europe/Dublin", "Africa/Casablanca",
	"America/St_Johns", "Asia/Kathmandu", "Pacific/Chatham",
	"Pacific/Kiritimati", "Asia/Tehran", "America/Sitka", "Asia/Manila",
	"Europe/Moscow", "Asia/Pyongyang", "America/Nuuk", "America/Asuncion",
	"Asia/Gaza", "Pacific/Norfolk", "America/Juneau",
}

var periodKinds = []Period{PeriodDay, PeriodWeek, PeriodMonth, PeriodYear}

// TestPeriodProperties draws random instants from 1840 to 2200 (local mean
// times, today's rules, and the rules tzdata extends into the future).
func TestPeriodProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 2026))
	lo := time.Date(1840, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	hi := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for _, zone := range periodZones {
		loc := periodLoad(t, zone)
		for _, p := range periodKinds {
			for range 150 {
				checkPeriod(t, Calendar{p, loc}, time.UnixMicro(lo+rng.Int64N(hi-lo)))
			}
		}
	}
}

// TestPeriodTransitions checks the period around every clock change of
// each zone from 1840 to 2100, where mistakes would be.
func TestPeriodTransitions(t *testing.T) {
	for _, zone := range periodZones {
		loc := periodLoad(t, zone)
		at := time.Date(1840, 1, 1, 0, 0, 0, 0, loc)
		for at.Year() < 2100 {
			_, next := at.ZoneBounds()
			if next.IsZero() {
				break
			}
			if !next.After(at) { // golang/go#81583
				next = at.Add(24 * time.Hour)
			}
			for _, p := range periodKinds {
				for _, d := range []time.Duration{-time.Microsecond, 0} {
					checkPeriod(t, Calendar{p, loc}, next.Add(d))
				}
			}
			at = next
		}
	}
}

// checkPeriod checks the period holding now: it holds now; its neighbours
// meet it; every instant in it gives the same bounds and Periods; and it
// starts on its first date's midnight, or where a clock change skipped it.
func checkPeriod(t *testing.T, c Calendar, now time.Time) {
	t.Helper()
	start, end := c.BoundsAt(now)
	where := c.Location.String() + " " + c.Period.String() + " at " + now.Format(time.RFC3339Nano)
	if now.Before(start) || !now.Before(end) {
		t.Fatalf("%s: [%v, %v) does not hold it", where, start, end)
	}
	if s, _ := c.BoundsAt(end); !s.Equal(end) {
		t.Fatalf("%s: the next period starts at %v, want %v", where, s, end)
	}
	if _, e := c.BoundsAt(start.Add(-time.Microsecond)); !e.Equal(start) {
		t.Fatalf("%s: the previous period ends at %v, want %v", where, e, start)
	}
	ps := c.PeriodsAt(now)
	for _, u := range []time.Time{start, end.Add(-time.Microsecond), periodMidway(start, end)} {
		if s, e := c.BoundsAt(u); !s.Equal(start) || !e.Equal(end) {
			t.Fatalf("%s: from %v: [%v, %v), want [%v, %v)", where, u, s, e, start, end)
		}
		if got := c.PeriodsAt(u); got != ps {
			t.Fatalf("%s: PeriodsAt(%v) = %+v, want %+v", where, u, got, ps)
		}
	}
	checkPeriodStart(t, where, c, start)
}

// checkPeriodStart: the clock reads midnight at start, or start is a clock
// change (the change skipped midnight); and start's local date is the
// first date of its period.
func checkPeriodStart(t *testing.T, where string, c Calendar, start time.Time) {
	t.Helper()
	h, m, s := start.Clock()
	if zs, _ := start.ZoneBounds(); (h != 0 || m != 0 || s != 0) && !zs.Equal(start) {
		t.Fatalf("%s: starts at %v, neither midnight nor a clock change", where, start)
	}
	if d := c.Period.firstDate(start.Date()); !d.Equal(periodDateOf(start)) {
		t.Fatalf("%s: starts at %v, not on its first date %v", where, start, d.Format(time.DateOnly))
	}
}

func TestPeriodsAt(t *testing.T) {
	c := Calendar{PeriodDay, periodLoad(t, "Europe/Berlin")}
	got := c.PeriodsAt(periodTime(t, "2026-03-29T12:00:00+02:00"))
	want := Periods{
		PrevStart: periodTime(t, "2026-03-28T00:00:00+01:00").UnixMicro(),
		Start:     periodTime(t, "2026-03-29T00:00:00+01:00").UnixMicro(),
		End:       periodTime(t, "2026-03-30T00:00:00+02:00").UnixMicro(),
		NextEnd:   periodTime(t, "2026-03-31T00:00:00+02:00").UnixMicro(),
	}
	if got != want {
		t.Errorf("PeriodsAt = %+v, want %+v", got, want)
	}
	// Apia: the day before 31 December 2011 is the 29th.
	c = Calendar{PeriodDay, periodLoad(t, "Pacific/Apia")}
	got = c.PeriodsAt(periodTime(t, "2011-12-31T12:00:00+14:00"))
	if want := periodTime(t, "2011-12-29T00:00:00-10:00").UnixMicro(); got.PrevStart != want {
		t.Errorf("Apia PrevStart = %d, want %d", got.PrevStart, want)
	}
}

// TestPeriodsAtStoreClock: the store's clock picks the period, within a
// skew of a neighbouring period either side, and nothing beyond.
func TestPeriodsAtStoreClock(t *testing.T) {
	ps := Periods{PrevStart: 1_000_000, Start: 2_000_000, End: 4_000_000, NextEnd: 7_000_000}
	prev, cur, next := Span{1_000_000, 2_000_000}, Span{2_000_000, 4_000_000}, Span{4_000_000, 7_000_000}
	for _, tc := range []struct {
		now  int64
		want Span
		ok   bool
	}{
		{999_999, Span{}, false},
		{1_000_000, prev, true},
		{1_999_999, prev, true},
		{2_000_000, cur, true},
		{3_999_999, cur, true},
		{4_000_000, next, true},
		{6_999_999, next, true},
		{7_000_000, Span{}, false},
		{-1, Span{}, false},
	} {
		if got, ok := ps.At(tc.now); got != tc.want || ok != tc.ok {
			t.Errorf("At(%d) = %+v, %v; want %+v, %v", tc.now, got, ok, tc.want, tc.ok)
		}
	}
}

// TestPeriodStoreSkew: Periods from a caller's clock, read with a store
// clock off by skew, give the period the store's clock is in.
func TestPeriodStoreSkew(t *testing.T) {
	c := Calendar{PeriodDay, periodLoad(t, "America/New_York")}
	caller := periodTime(t, "2026-03-08T00:00:30-05:00") // 30 s into a 23 h day
	ps := c.PeriodsAt(caller)
	for _, skew := range []time.Duration{
		0, time.Second, -time.Second, -31 * time.Second, -24 * time.Hour,
		22 * time.Hour, 23 * time.Hour, 46 * time.Hour, 47 * time.Hour,
		-24*time.Hour - 30*time.Second, -24*time.Hour - 31*time.Second,
	} {
		store := caller.Add(skew)
		got, ok := ps.At(store.UnixMicro())
		s, e := c.BoundsAt(store)
		inRange := !s.Before(time.UnixMicro(ps.PrevStart)) && !e.After(time.UnixMicro(ps.NextEnd))
		if ok != inRange || (ok && got != (Span{s.UnixMicro(), e.UnixMicro()})) {
			t.Errorf("skew %v: At = %+v, %v; the store's day is [%v, %v)", skew, got, ok, s, e)
		}
	}
}

func TestPeriodSpanSeconds(t *testing.T) {
	day := Span{Start: 1_000_000, End: 1_000_000 + 23*3600*1_000_000}
	for _, tc := range []struct {
		now, left int64
	}{
		{day.Start, 23 * 3600},
		{day.End - 1_000_000, 1},
		{day.End - 999_999, 1},
		{day.End - 1, 1},
		{day.End - 1_000_001, 2},
		{day.End, 0},
		{day.End + 5_000_000, 0},
	} {
		if got := day.SecondsLeftAt(tc.now); got != tc.left {
			t.Errorf("SecondsLeftAt(End%+d µs) = %d, want %d", tc.now-day.End, got, tc.left)
		}
	}
	if got := day.Seconds(); got != 23*3600 {
		t.Errorf("Seconds = %d, want %d", got, 23*3600)
	}
	if got := day.Micros(); got != 23*3600*1_000_000 {
		t.Errorf("Micros = %d, want %d", got, int64(23*3600*1_000_000))
	}
	if got := (Span{0, 1_500_000}).Seconds(); got != 2 {
		t.Errorf("Seconds of 1.5 s = %d, want 2", got)
	}
}

const periodTZScript = `for d in /usr/share/zoneinfo /usr/share/lib/zoneinfo /usr/lib/locale/TZ /etc/zoneinfo; do
	if [ -e "$d" ]; then mount --bind "$EMPTY" "$d" || exit 77; fi
done
exec "$@"`

func TestPeriodCache(t *testing.T) {
	c := Calendar{PeriodDay, periodLoad(t, "Europe/Berlin")}
	pc := NewPeriodCache(c)
	for _, s := range []string{
		"2026-03-29T12:00:00+02:00", "2026-03-29T23:59:59.999999+02:00",
		"2026-03-30T00:00:00+02:00", "2026-03-30T08:00:00+02:00",
		"2026-03-28T23:00:00+01:00", // the clock stepped back a day
		"2026-10-25T02:30:00+01:00", "2026-10-25T02:30:00+02:00",
	} {
		now := periodTime(t, s)
		if got, want := pc.PeriodsAt(now), c.PeriodsAt(now); got != want {
			t.Errorf("at %s: got %+v, want %+v", s, got, want)
		}
	}
}

func BenchmarkPeriodCache(b *testing.B) {
	pc := NewPeriodCache(Calendar{PeriodMonth, periodLoad(b, "Europe/Berlin")})
	now := time.Date(2026, 3, 29, 12, 0, 0, 0, time.UTC)
	for b.Loop() {
		pc.PeriodsAt(now)
	}
}

func BenchmarkPeriodsAt(b *testing.B) {
	c := Calendar{PeriodMonth, periodLoad(b, "Europe/Berlin")}
	now := time.Date(2026, 3, 29, 12, 0, 0, 0, time.UTC)
	for b.Loop() {
		c.PeriodsAt(now)
	}
}

func periodLoad(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := LoadTimeZone(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func periodTime(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func periodMidway(a, b time.Time) time.Time { return a.Add(b.Sub(a) / 2) }

// periodDateOf is t's local date as midnight UTC, as firstDate returns dates.
func periodDateOf(t time.Time) time.Time {
	y, m, d := t.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// TestIsClockSkew: an error is clock skew alone when it wraps
// ErrClockSkew and every error joined in it does too: a Cluster request
// whose other zone timed out failed the store.
func TestIsClockSkew(t *testing.T) {
	skew := fmt.Errorf("decide script, request 1 of 2: %w (ERR …)", ErrClockSkew)
	other := errors.New("i/o timeout")
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"skew", ErrClockSkew, true},
		{"wrapped skew", fmt.Errorf("running decide script: %w", skew), true},
		{"another error", other, false},
		{"skews joined", errors.Join(skew, nil, ErrClockSkew), true},
		{"skew joined with a timeout", errors.Join(skew, other), false},
		{"wrapped join with a timeout", fmt.Errorf("deciding: %w", errors.Join(skew, other)), false},
		{"empty join", errors.Join(nil), false},
	}
	for _, tt := range tests {
		if got := IsClockSkew(tt.err); got != tt.want {
			t.Errorf("%s: IsClockSkew(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}
