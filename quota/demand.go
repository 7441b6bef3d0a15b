package quota

import (
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// A key's demand on this instance: the units its requests took in the
// last spans, which size its asks for leases, and whether it is warm
// enough to ask for one at all.

// demand is a key's recent demand in units: cur since start, prev in the
// span before it. A span is two quota_leases (demandSpan), so an estimate
// covers two to four of them.
type demand struct {
	start     time.Time
	since     time.Time // when this run of demand began: the key was cold before
	cur, prev int64
	// mark is when ask first saw this run fastDemandFor old, marked the
	// units of the run then: fast measures the run's rate after it
	mark   time.Time
	marked int64
	fast   bool // this run was fast once: it is warm
}

// demandWarmup is how long a key's demand must have lasted before it
// asks for a lease (a span, when shorter), unless it is fast: a burst
// shorter than that, such as a client's concurrent requests, is decided
// in the store, exactly; a lease would strand its units on the instances
// the burst leaves first.
const demandWarmup = 500 * time.Millisecond

// A demand is fast, and asks for a lease before demandWarmup, when it
// keeps up fastDemandRate units a second (at least) for fastDemandFor
// after its first fastDemandFor: a hot key (a batch job, a retry storm)
// leases within about twice fastDemandFor, while a client's burst of
// concurrent requests, over within fastDemandFor, and a key a few hundred
// times a second wait out demandWarmup; and the lease is sized by the
// rate after the first fastDemandFor, the burst left out.
const (
	fastDemandFor  = 20 * time.Millisecond
	fastDemandRate = 1000
)

// demandSpan is the span demand counts in for a zone of quota_lease
// leaseFor: long enough to smooth bursts, short enough to follow a change
// within a few leases.
func demandSpan(leaseFor time.Duration) time.Duration { return 2 * leaseFor }

// roll moves d's spans to hold now.
func (d *demand) roll(now time.Time, span time.Duration) {
	elapsed := now.Sub(d.start)
	switch {
	case d.start.IsZero() || elapsed < 0 || elapsed >= 2*span:
		*d = demand{start: now, since: now}
	case elapsed >= span:
		d.start, d.prev, d.cur = d.start.Add(span), d.cur, 0
	}
}

// within is the units demanded in the span up to now (d rolled to now):
// the current span's, and the share of the previous one still in it.
func (d *demand) within(now time.Time, span time.Duration) float64 {
	left := float64(span-now.Sub(d.start)) / float64(span)
	return float64(d.cur) + float64(d.prev)*max(0, left)
}

// over is the units the demand up to now uses in d: the rate of the last
// span over a duration.
func (d *demand) over(now time.Time, span, during time.Duration) float64 {
	return d.within(now, span) * float64(during) / float64(span)
}

// ask is the units to ask for a lease that serves for life (leaseLife):
// what the demand up to now uses in one, or 0 for a cold key: one whose
// demand has not lasted demandWarmup (or a span, when shorter) and was
// never fast in this run (fastDemandRate and fastDemandFor), or would not
// use 2. Within the first span, a fast run's demand is its rate since
// mark, the burst that may have begun it left out.
func (d *demand) ask(now time.Time, span, life time.Duration) int64 {
	lasted := now.Sub(d.since)
	if lasted < span { // d.start is d.since: cur is all of this run
		if d.mark.IsZero() && lasted >= fastDemandFor {
			d.mark, d.marked = now, d.cur
		}
		if after := now.Sub(d.mark); !d.mark.IsZero() && after >= fastDemandFor {
			rate := float64(d.cur-d.marked) / after.Seconds()
			d.fast = d.fast || rate >= fastDemandRate
			if d.fast && lasted < min(span, demandWarmup) {
				return units(rate * life.Seconds())
			}
		}
	}
	if lasted < min(span, demandWarmup) {
		return 0
	}
	return units(d.over(now, span, life))
}

// units is a demand's ask of n units: 0 below 2, at most MaxEvents.
func units(n float64) int64 {
	if n < 2 {
		return 0
	}
	return int64(min(n, algorithms.MaxEvents))
}
