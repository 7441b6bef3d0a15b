package sluice

import (
	"fmt"
	"time"

	"go.uber.org/zap"

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

// clockSkews throttles the log of decisions Redis refused as clock skew
// (algorithms.ErrClockSkew): one line per logInterval in the process, as
// the skew is this instance's clock, whichever handler meets it.
var clockSkews = throttle{interval: logInterval}

// logClockSkew logs, at most once per logInterval, that Redis refused a
// period decision because this instance's clock and Redis's differ by
// about a period or more: failure_mode (mode) decided it, and the other
// zones still decide on Redis. It is no outage of Redis: the breaker does
// not count it, and no recovery follows.
func logClockSkew(logger *zap.Logger, mode string, err error) {
	if n, ok := clockSkews.tickAt(time.Now()); ok {
		logger.Error("this instance's clock is off from redis's by about a period or more; its period zones' decisions fail and failure_mode decides them until the clock is fixed",
			zap.Error(err), zap.String("failure_mode", mode), zap.Int("requests", n))
	}
}
