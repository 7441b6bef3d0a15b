package algorithms

import (
	"errors"
	"math"
	"sync/atomic"
	"time"
)

// Calendar is a Period in a time zone: the periods a calendar zone counts
// in. A nil Location is UTC. Its methods are pure and safe for concurrent
// use (a *time.Location is read-only).
type Calendar struct {
	Period   Period
	Location *time.Location
}

// BoundsAt returns the period holding now: start ≤ now < end, and end is
// the next period's start, so periods are consecutive with neither gaps
// nor overlaps, and every instant in [start, end) gives the same bounds.
//
// A period runs from the first instant of its first local date to the
// first instant of the next period's: a day is as long as the zone's clock
// says (23 or 25 hours across DST, 23.5 or 24.5 on Australia/Lord_Howe).
// A date the zone skipped has no period (Pacific/Apia went from 29 to 31
// December 2011), and a date that comes back after the clock went back
// across midnight stays in the period already begun, so periods never go
// backwards (America/Sitka's 19 October 1867 lasts 48 hours). An invalid
// Period counts as PeriodDay.
func (c Calendar) BoundsAt(now time.Time) (start, end time.Time) {
	loc := c.location()
	first := c.Period.firstDate(now.In(loc).Date())
	s := firstInstant(loc, first)
	for {
		next := c.Period.nextDate(first)
		e := firstInstant(loc, next)
		if now.Before(time.Unix(e, 0)) {
			return time.Unix(s, 0).In(loc), time.Unix(e, 0).In(loc)
		}
		// The clock went back across a boundary: now's local date is
		// earlier than a date that has already begun.
		first, s = next, e
	}
}

func (c Calendar) location() *time.Location {
	if c.Location == nil {
		return time.UTC
	}
	return c.Location
}

// firstDate returns the first date of the period holding the date y-m-d,
// as midnight UTC (a civil date, not an instant).
func (p Period) firstDate(y int, m time.Month, d int) time.Time {
	switch p {
	case PeriodWeek:
		t := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		return t.AddDate(0, 0, -(int(t.Weekday())+6)%7) // back to Monday
	case PeriodMonth:
		return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	case PeriodYear:
		return time.Date(y, time.January, 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// nextDate returns the first date of the period after the one whose first
// date is first.
func (p Period) nextDate(first time.Time) time.Time {
	switch p {
	case PeriodWeek:
		return first.AddDate(0, 0, 7)
	case PeriodMonth:
		return first.AddDate(0, 1, 0) // first is the 1st: never normalized
	case PeriodYear:
		return first.AddDate(1, 0, 0)
	}
	return first.AddDate(0, 0, 1)
}

// offsetBound bounds a zone's UTC offset: tzfile(5) keeps them within
// -25 h and +26 h (the widest in tzdata are about ±16 h, local mean times).
const offsetBound = 26 * 60 * 60

// firstInstant returns the first instant, in Unix seconds, at which loc's
// clock reads date's midnight or later: local midnight when it exists,
// else the end of the clock change that skipped it. It walks the zone's
// offsets from the earliest instant that could qualify (a few lookups;
// one or two clock changes at most in practice), so it does not rely on
// time.Date, whose choice in a skipped or repeated hour is unspecified.
func firstInstant(loc *time.Location, date time.Time) int64 {
	wall := date.Unix() // the wall clock's reading, as Unix seconds
	u := wall - offsetBound
	for {
		offset, until := offsetAt(loc, u)
		if at := max(u, wall-int64(offset)); at < until {
			return at
		}
		u = until
	}
}

// offsetAt returns loc's UTC offset at u (Unix seconds) and an instant
// after u until which it holds: the next clock change, or before it.
func offsetAt(loc *time.Location, u int64) (offset int, until int64) {
	t := time.Unix(u, 0).In(loc)
	_, offset = t.Zone()
	_, end := t.ZoneBounds()
	switch {
	case end.IsZero():
		return offset, math.MaxInt64
	case end.Unix() > u:
		return offset, end.Unix()
	}
	// golang/go#81583: in the last UTC day of a leap year that a zone's
	// TZ rule string serves (after its table of clock changes, 2037 for
	// most zones), ZoneBounds ends a day early, before t. The offset then
	// holds into the next UTC year: that year's first change is later.
	return offset, time.Date(t.UTC().Year()+1, time.January, 1, 0, 0, 0, 0, time.UTC).Unix()
}

// Periods is the period holding the caller's now and its two neighbours,
// as four consecutive boundaries in Unix microseconds: the previous period
// is [PrevStart, Start), the current [Start, End), the next [End,
// NextEnd). The handler computes it from its own clock (PeriodsAt) and
// the store picks the period holding the store's clock (At), so Redis TIME
// stays the one clock. Boundaries are whole seconds; in the scripts they
// stay exact doubles (below 2^53 µs) until the year 2255.
type Periods struct {
	PrevStart, Start, End, NextEnd int64
}

// ErrClockSkew is what a store reports when its clock is outside the
// Periods it was given: the store's clock and the caller's differ by about
// a period or more, so one of them is wrong, and nothing is counted.
var ErrClockSkew = errors.New("store clock is outside the calendar periods around the caller's clock")

// IsClockSkew reports whether err is ErrClockSkew alone: it wraps
// ErrClockSkew, and every error joined in it (a Cluster request's zones
// fail apart) does too. Such an error is an answer of the store, which
// refused one caller's clock: it says nothing of the store's health.
func IsClockSkew(err error) bool {
	switch e := err.(type) {
	case nil:
		return false
	case interface{ Unwrap() []error }:
		errs := e.Unwrap()
		for _, inner := range errs {
			if !IsClockSkew(inner) {
				return false
			}
		}
		return len(errs) > 0
	}
	return err == ErrClockSkew || IsClockSkew(errors.Unwrap(err))
}

// PeriodsAt returns the Periods around now. Every instant of one period
// gives the same Periods, so a caller may keep the value while its clock
// stays in [Start, End) instead of computing it per request.
func (c Calendar) PeriodsAt(now time.Time) Periods {
	start, end := c.BoundsAt(now)
	prev, _ := c.BoundsAt(start.Add(-time.Microsecond))
	_, next := c.BoundsAt(end)
	return Periods{
		PrevStart: prev.UnixMicro(),
		Start:     start.UnixMicro(),
		End:       end.UnixMicro(),
		NextEnd:   next.UnixMicro(),
	}
}

// PeriodCache keeps a Calendar's Periods while the caller's clock stays in
// their current period, so a request pays an atomic load and two
// comparisons instead of PeriodsAt (a few µs of time zone lookups); it
// recomputes once per period, or when the clock steps back. It returns
// what PeriodsAt would. Safe for concurrent use; make it with
// NewPeriodCache.
type PeriodCache struct {
	calendar Calendar
	current  atomic.Pointer[Periods]
}

// NewPeriodCache returns an empty PeriodCache for c.
func NewPeriodCache(c Calendar) *PeriodCache {
	return &PeriodCache{calendar: c}
}

// PeriodsAt returns c's Periods around now, as Calendar.PeriodsAt.
func (pc *PeriodCache) PeriodsAt(now time.Time) Periods {
	us := now.UnixMicro() // boundaries are whole seconds: no rounding issue
	if ps := pc.current.Load(); ps != nil && ps.Start <= us && us < ps.End {
		return *ps
	}
	ps := pc.calendar.PeriodsAt(now)
	pc.current.Store(&ps)
	return ps
}

// At returns the period of ps holding now, the store's clock in Unix
// microseconds; luascripts and the memory store mirror it. Built from a
// caller's clock c in [Start, End), ps covers a store clock behind c by up
// to c − PrevStart (at least the previous period's length: 23 hours for a
// day) and ahead by up to NextEnd − c (at least the next period's length).
// Beyond that ok is false and the store must count nothing and report
// ErrClockSkew: clamping to the nearest period would count in one that has
// ended, whose state expires at once, so nothing would ever be denied.
func (ps Periods) At(now int64) (span Span, ok bool) {
	switch {
	case now < ps.PrevStart || now >= ps.NextEnd:
		return Span{}, false
	case now < ps.Start:
		return Span{ps.PrevStart, ps.Start}, true
	case now < ps.End:
		return Span{ps.Start, ps.End}, true
	}
	return Span{ps.End, ps.NextEnd}, true
}

// Span is one period, [Start, End) in Unix microseconds.
type Span struct {
	Start, End int64
}

// Micros is the period's length in microseconds: its fixed_window length
// (state expires at End).
func (s Span) Micros() int64 { return s.End - s.Start }

// Seconds is the period's length in seconds, the headers' `w` and the
// admin API's window: exact, since boundaries are whole seconds (rounded
// up otherwise).
func (s Span) Seconds() int64 { return ceilMicrosToSeconds(s.End - s.Start) }

// SecondsLeftAt is the time from now (Unix µs) to the period's end in
// whole seconds, rounded up so a client that waits it out is never early:
// `t` and Retry-After when the period's quota is spent. 0 once it ended.
func (s Span) SecondsLeftAt(now int64) int64 {
	return ceilMicrosToSeconds(max(0, s.End-now))
}

func ceilMicrosToSeconds(us int64) int64 {
	return (us + 999_999) / 1_000_000
}
