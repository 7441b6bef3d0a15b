package algorithms

import (
	"fmt"
	"time"

	// The time zone database, built into the binary (about 450 kB), so that
	// a period zone's time_zone loads on a host without /usr/share/zoneinfo
	// (scratch and distroless images, Windows). Go still reads $ZONEINFO
	// and the host's database first when they hold the zone; this copy is
	// the fallback.
	_ "time/tzdata"
)

// Period is the calendar period a fixed_window zone counts in instead of a
// window of fixed length (`period day|week|month|year`). The zero value,
// NoPeriod, is a zone with a window.
type Period uint8

// The periods. Each starts on the first instant of its first date in the
// zone's time zone: usually local midnight, or the end of a clock change
// that skips midnight (America/Havana, America/Santiago, Asia/Beirut).
const (
	NoPeriod    Period = iota
	PeriodDay          // a local date: 23 or 25 hours across DST
	PeriodWeek         // an ISO week, from Monday
	PeriodMonth        // from the 1st
	PeriodYear         // from 1 January
)

var periodNames = [...]string{"", "day", "week", "month", "year"}

// ParsePeriod returns the Period a Caddyfile or JSON word names. Its error
// names the option ("period: want day, week, month or year, got ..."),
// so a caller adds only its own context ("zone api: ").
func ParsePeriod(s string) (Period, error) {
	for p, name := range periodNames {
		if p != int(NoPeriod) && s == name {
			return Period(p), nil
		}
	}
	return NoPeriod, fmt.Errorf("period: want day, week, month or year, got %q", s)
}

// String returns the period's Caddyfile word ("" for NoPeriod).
func (p Period) String() string {
	if int(p) < len(periodNames) {
		return periodNames[p]
	}
	return fmt.Sprintf("Period(%d)", p)
}

// MarshalText makes a Period a JSON string ("month"); NoPeriod is "".
func (p Period) MarshalText() ([]byte, error) {
	if int(p) >= len(periodNames) {
		return nil, fmt.Errorf("period: invalid value %d", p)
	}
	return []byte(periodNames[p]), nil
}

// UnmarshalText reads a JSON string: "" is NoPeriod, else as ParsePeriod.
func (p *Period) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*p = NoPeriod
		return nil
	}
	v, err := ParsePeriod(string(b))
	*p = v
	return err
}

// DefaultTimeZone is the time zone of a period zone without `time_zone`:
// UTC, the one every instance and the operator read the same way.
const DefaultTimeZone = "UTC"

// LoadTimeZone returns the location an IANA name (`time_zone`) names; ""
// is DefaultTimeZone. "Local" is refused: it would make each instance count
// in its own host's zone. Its error names the option, as ParsePeriod's.
func LoadTimeZone(name string) (*time.Location, error) {
	if name == "" {
		name = DefaultTimeZone
	}
	if name == "Local" {
		return nil, fmt.Errorf("time_zone: want an IANA name such as Europe/Berlin, got %q (the host's zone)", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("time_zone: want an IANA name such as Europe/Berlin, got %q: %w", name, err)
	}
	return loc, nil
}
