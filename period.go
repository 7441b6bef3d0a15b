package sluice

import (
	"fmt"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// calendar reads Period and TimeZone: the zero Calendar without a period.
// A period zone defaults to fixed_window (Limit.Validate refuses another
// algorithm, and a window).
func (z *Zone) calendar() (algorithms.Calendar, error) {
	if z.Period == "" {
		if z.TimeZone != "" {
			return algorithms.Calendar{}, fmt.Errorf("time_zone applies only with period")
		}
		return algorithms.Calendar{}, nil
	}
	period, err := algorithms.ParsePeriod(z.Period)
	if err != nil {
		return algorithms.Calendar{}, err
	}
	loc, err := algorithms.LoadTimeZone(z.TimeZone)
	if err != nil {
		return algorithms.Calendar{}, err
	}
	if z.Algorithm == "" {
		z.Algorithm = string(algorithms.FixedWindow)
	}
	return algorithms.Calendar{Period: period, Location: loc}, nil
}

// setupPeriods gives a period zone its PeriodCache.
func (z *Zone) setupPeriods() {
	z.periods = nil
	if z.limit.HasPeriod() {
		z.periods = algorithms.NewPeriodCache(z.limit.Calendar)
	}
}

// limitNow is the zone's limit for a request now: with a period, the
// period boundaries around Caddy's clock, among which the store counts in
// the one holding its own.
func (z *Zone) limitNow() algorithms.Limit {
	l := z.limit
	if z.periods != nil {
		l.Periods = z.periods.PeriodsAt(time.Now())
	}
	return l
}

// describePeriod adds a period zone's period and time zone to its admin
// API description, its window being the current period's length.
func (z *Zone) describePeriod(info *zoneInfo) {
	if z.periods == nil {
		return
	}
	info.Period, info.TimeZone = z.limit.Calendar.Period.String(), z.timeZoneName()
	info.Window = float64(z.periodSpan(algorithms.Decision{}).Seconds())
}
