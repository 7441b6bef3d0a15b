// Package adaptive is the adaptive concurrency limiter of Sluice's
// `algorithm adaptive`: a limit on requests in flight, per instance, that
// follows the upstream's latency between a floor and a ceiling. It is
// plain Go, with time as a parameter (its methods ending in At take now),
// as golang.org/x/time/rate does, so its rules are tested on an injected
// clock.
//
// The rules: the latency of each request (its handler measures it) is a
// sample. Every interval (jittered, so instances do not move in step) the
// limiter takes the interval's median latency; the baseline is a
// windowed low percentile of those medians, fed only from intervals
// where in flight stayed at most max(min, limit/2), falling at once and
// rising at most 10% a minute (baseline.go). The limit grows only in an
// interval where in flight reached half the limit with at least 20
// samples and a median in the growth band (growBand), and shrinks,
// gradient-style toward that band, when the interval's median passes
// tolerance × baseline (an interval whose own requests show that ends
// early: overloadShown), unless a shrink that cut the requests in flight
// by a fifth or more left the latency where it was (deafGradient): the
// upstream is slower, not queued, and the limit holds. There is no probe
// phase that pins the limit low.
// Classes share the limit (classes.go); a queue (queue.go) holds requests
// that wait for a slot, for max_delay, or less under overload
// (EnqueueAt).
package adaptive

import (
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// Defaults and rules of the limit.
const (
	DefaultTolerance = 1.5
	DefaultInterval  = 500 * time.Millisecond
	DefaultJitter    = 0.2
	DefaultMaxQueue  = 1024

	// growSamples is the fewest samples of an interval the limit grows in.
	growSamples = 20
	// shrinkSamples is the fewest samples an interval's median is read
	// from: with fewer, the interval goes on (up to maxInterval), so one
	// slow request at 1 req/min collapses nothing.
	shrinkSamples = 5
	// maxInterval is the longest an interval with too few samples goes
	// on; then its samples are dropped.
	maxInterval = time.Minute
	// growBand: the limit grows only while the interval's median is
	// within 1/growBand of the tolerance above the baseline (1.125 ×
	// the baseline at tolerance 1.5), and a shrink aims at that top: it
	// settles where the upstream barely queues, so that admitted
	// requests' latency stays near the unloaded one (with half the band
	// it settled where the upstream's own p99 was 1.6 × unloaded; a
	// shrink aimed at tolerance × baseline left it resting just under
	// that, at 1.3–1.4 ×).
	growBand = 4
	// minGradient is the most one interval shrinks the limit: by half.
	minGradient = 0.5
	// A shrink of the limit to a fifth or more below the requests in
	// flight (at most deafGradient of them) that left the next interval's
	// latency within deafLow..deafHigh of the latency that caused it
	// shows the latency is not the queue the limit controls: the upstream
	// got slower. (A shrink that left the limit above the requests in
	// flight changed nothing, and shows nothing.) The limit
	// then holds, while the latency stays in that band, instead of
	// shrinking to min (the baseline learns the slower upstream within
	// minutes).
	deafGradient = 0.8
	deafLow      = 0.95
	deafHigh     = 1.10
	// A class's queue counts as standing once it has stayed non-empty for one
	// baseline, between minStandingAfter and maxStandingAfter (CoDel's
	// interval for a server's queue, as Facebook runs it: 100 ms): a
	// queue that outlasts a whole upstream latency is overload, not a
	// burst, and the sooner it is seen, the fewer requests are admitted
	// after waiting their max_delay. The floor keeps a fast upstream's
	// bursts (a baseline of 1 ms) from counting as overload.
	minStandingAfter = 10 * time.Millisecond
	maxStandingAfter = 100 * time.Millisecond
	// standingHold is how long a queue counts as standing after it was
	// last seen so.
	standingHold = time.Second
	// standingWaitDiv: under a standing queue a request waits at most
	// the baseline / standingWaitDiv (4 ms at a 30 ms upstream; CoDel at
	// Facebook holds a server's requests 5 ms): enough to keep the slots
	// busy under overload, little beside the upstream's own latency.
	standingWaitDiv = 8
	// minStandingWait is the least a request waits under a standing
	// queue, however fast the upstream.
	minStandingWait = time.Millisecond
)

// DefaultMin is the floor of a limit whose ceiling is events: min(4, events).
func DefaultMin(events int) int { return min(4, events) }

// DefaultInitial is the limit a limiter of floor min and ceiling events
// starts at: clamp(20, min, events).
func DefaultInitial(minimum, events int) int { return min(max(20, minimum), events) }

// Config is a limiter's configuration.
type Config struct {
	Min, Max, Initial int           // the floor, the ceiling and the start of the limit
	Tolerance         float64       // latency over the baseline read as overload; > 1
	Classes           int           // how many priority classes share the limit; 0 or 1: one
	Reserve           float64       // the fraction of the limit only the first class may use
	Interval          time.Duration // how often the limit is updated, before jitter
	Jitter            float64       // the interval varies by up to this fraction either way
	MaxQueue          int           // the most tickets waiting at once
	Rand              func() float64
}

// InitialLimit is the limit a new limiter of c starts at: Initial, or
// its default, within [Min, Max].
func (c Config) InitialLimit() int {
	c.setDefaults()
	return c.Initial
}

func (c *Config) setDefaults() {
	if c.Max <= 0 {
		c.Max = 1
	}
	if c.Min <= 0 {
		c.Min = DefaultMin(c.Max)
	}
	c.Min = min(c.Min, c.Max)
	if c.Initial <= 0 {
		c.Initial = DefaultInitial(c.Min, c.Max)
	}
	c.Initial = min(max(c.Initial, c.Min), c.Max)
	if c.Tolerance <= 1 {
		c.Tolerance = DefaultTolerance
	}
	c.Classes = max(c.Classes, 1)
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Jitter < 0 || c.Jitter >= 1 {
		c.Jitter = DefaultJitter
	}
	if c.MaxQueue <= 0 {
		c.MaxQueue = DefaultMaxQueue
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
}

// Outcome is how a request that held a slot ended, for its sample.
type Outcome int

const (
	// Answered: its first response header came; the latency is a sample.
	Answered Outcome = iota
	// Overloaded: the upstream answered 503 or 504; the sample is at
	// least tolerance × baseline.
	Overloaded
	// Abandoned: the client left before the first header; its elapsed
	// time is a sample only when it is at least tolerance × baseline.
	Abandoned
)

// Slot is a request's slot in flight, taken from a limiter.
type Slot struct {
	calm     bool   // taken while in flight was at most max(min, limit/2)
	interval uint64 // the interval it was taken in (interval.seq)
	// Share is its class's share of the limit when it was taken, and
	// InFlight the requests in flight then, itself included: what its
	// RateLimit member shows (q, and r = max(0, Share − InFlight)).
	Share, InFlight int
}

// Remaining is what was left of its class's share once it was taken.
func (s Slot) Remaining() int { return max(0, s.Share-s.InFlight) }

// State is what a limiter shows.
type State struct {
	Limit, InFlight, Waiting int
	Baseline                 time.Duration
}

// interval is what the current interval collected.
type interval struct {
	seq         uint64 // counts the intervals: a Slot names the one it was taken in
	start, end  time.Time
	samples     []time.Duration // every sample
	calm        []time.Duration // those of slots taken while calm
	own         []time.Duration // those of slots taken in this interval
	ownOver     int             // how many of own's latest growSamples reached tolerance × baseline
	maxInFlight int
}

// Limiter limits requests in flight to a limit that follows their
// latency. Safe for concurrent use.
type Limiter struct {
	mu       sync.Mutex
	cfg      Config
	limit    int
	inFlight int
	base     baseline
	iv       interval
	q        queue
	// wakeEnd is when serve runs next because a waiting class stops
	// yielding (wakeAt); zero while no such run is due. after schedules
	// it: afterFunc, or the tests' own.
	wakeEnd time.Time
	after   func(time.Duration, func())
	// shrunk is the median that made the limit shrink to a fifth or more
	// below the requests in flight, in the last interval that shrank it
	// or held it deaf; 0 otherwise
	shrunk time.Duration
}

// New is a limiter of cfg (its zero fields defaulted), starting at now.
func New(cfg Config, now time.Time) *Limiter {
	cfg.setDefaults()
	l := &Limiter{cfg: cfg, limit: cfg.Initial, q: newQueue(cfg.Classes), after: afterFunc}
	l.startInterval(now)
	return l
}

// Reconfigure applies what a reload may change while the limiter is kept
// (tolerance and reserve); the limit, baseline, slots and queue stay.
func (l *Limiter) Reconfigure(tolerance, reserve float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if tolerance > 1 && tolerance != l.cfg.Tolerance {
		l.cfg.Tolerance = tolerance
		l.iv.ownOver = 0 // counted against the old tolerance: again
		for _, latency := range l.iv.own[max(0, len(l.iv.own)-growSamples):] {
			if latency >= l.overload() {
				l.iv.ownOver++
			}
		}
	}
	l.cfg.Reserve = reserve
	l.serve(time.Now())
}

// share is what class may use of the limit now.
func (l *Limiter) share(class int) int {
	return Share(l.limit, class, l.cfg.Classes, l.cfg.Reserve)
}

// Share is what class may use of the current limit.
func (l *Limiter) Share(class int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.share(l.class(class))
}

func (l *Limiter) class(c int) int { return min(max(c, 0), l.cfg.Classes-1) }

// fits reports whether a request of class may take a slot at now: its
// share has room, and it does not yield to a better class (yields).
func (l *Limiter) fits(now time.Time, class int) bool {
	return l.inFlight < l.share(class) && !l.yields(now, class)
}

// yields reports whether class leaves a free slot to an overloaded
// better class: one whose standing queue a request joined and found no
// slot in within the last yieldFor. Arrivals come in clumps, so that
// class's queue may be empty for a moment; a worse class admitted then
// takes a slot its next requests need (at 10× capacity, with critical
// demand alone twice the capacity, these were most of the non-critical
// requests admitted).
func (l *Limiter) yields(now time.Time, class int) bool {
	return now.Before(l.q.yieldEnd(class, l.yieldFor()))
}

// yieldFor is how long a worse class yields after a request joined an
// overloaded better class's queue: one baseline, as standingAfter (by
// then that class's next request is on its way if it is overloaded).
func (l *Limiter) yieldFor() time.Duration { return l.standingAfter() }

// take gives a slot to a request of class.
func (l *Limiter) take(class int) Slot {
	l.inFlight++
	l.iv.maxInFlight = max(l.iv.maxInFlight, l.inFlight)
	return Slot{calm: l.inFlight <= max(l.cfg.Min, l.limit/2), interval: l.iv.seq, Share: l.share(class), InFlight: l.inFlight}
}

// AcquireAt takes a slot for a request of class if its share has room,
// its class does not yield (yields) and no request of its class or a
// better one waits (a new request does not pass them). ok false: the
// request is over its share.
func (l *Limiter) AcquireAt(now time.Time, class int) (s Slot, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.updateAt(now)
	class = l.class(class)
	if !l.fits(now, class) || l.q.waitingUpTo(class) {
		return Slot{}, false
	}
	return l.take(class), true
}

// ForceAt takes a slot whatever the share (dry run: the limit adapts,
// nothing is shed), and reports whether AcquireAt would have.
func (l *Limiter) ForceAt(now time.Time, class int) (s Slot, fits bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.updateAt(now)
	class = l.class(class)
	fits = l.fits(now, class) && !l.q.waitingUpTo(class)
	return l.take(class), fits
}

// EnqueueAt puts a request of class, over its share, in the queue to
// wait up to maxDelay (Ticket.Wait), or returns nil when the queue is
// full. If a slot is free for it already (one was released since
// AcquireAt), the ticket is ready at once. When its class's queue stands
// (not empty for a baseline, standingAfter: overload, not a burst) it
// waits at most an eighth of the baseline (standingWaitDiv), so an
// admitted request's latency stays within about 1.125 × the upstream's:
// as CoDel does for a server's queue, the
// queue keeps absorbing bursts while no request it admits has waited
// long (FIFO under overload would admit only requests that waited
// max_delay). A request already waiting keeps its time. Each class's
// queue stands on its own: a class served first under a load the others
// make seldom waits, and keeps its max_delay for the moments it does. A
// request that joins its class's standing queue and finds the class's
// share full marks the class overloaded: worse classes yield to it.
func (l *Limiter) EnqueueAt(now time.Time, class int, maxDelay time.Duration) *Ticket {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.updateAt(now)
	if l.q.n >= l.cfg.MaxQueue {
		return nil
	}
	class = l.class(class)
	wait := maxDelay
	standing := l.base.value > 0 && l.q.standing(now, class, l.standingAfter())
	if standing {
		wait = min(maxDelay, max(l.base.value/standingWaitDiv, minStandingWait))
	}
	t := l.q.push(now, class, wait)
	l.serve(now)
	if o := &l.q.classes[class].overloaded; standing && !t.granted && l.inFlight >= l.share(class) && now.After(*o) {
		*o = now
	}
	return t
}

// standingAfter is how long the queue must stay non-empty to count as
// standing: one baseline, within [minStandingAfter, maxStandingAfter].
func (l *Limiter) standingAfter() time.Duration {
	return min(max(l.base.value, minStandingAfter), maxStandingAfter)
}

// Leave takes t out of the queue (its time is up or its client left).
// It reports whether t was granted a slot meanwhile: the caller holds
// that slot (Slot) and must release or cancel it.
func (l *Limiter) Leave(t *Ticket) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.granted {
		return true
	}
	l.q.remove(t)
	return false
}

// Slot is the slot a granted ticket holds.
func (t *Ticket) Slot() Slot { return t.slot }

// serve grants waiting tickets the slots their shares allow at now.
// When a ticket whose share has room waits only because its class
// yields, serve runs again when that ends (wakeAt): no answer may come
// before the ticket's time is up.
func (l *Limiter) serve(now time.Time) {
	l.q.serve(func(class int) bool { return l.fits(now, class) }, func(t *Ticket) { t.slot = l.take(t.class) })
	if c, ok := l.q.bestWaiting(); ok && l.inFlight < l.share(c) {
		if end := l.q.yieldEnd(c, l.yieldFor()); now.Before(end) {
			l.wakeAt(now, end)
		}
	}
}

// wakeAt has serve run at end (on the clock now was read from), unless
// a run is due by then already. Wakes are rare (a class that yields with
// room in its share): each has a timer of its own.
func (l *Limiter) wakeAt(now, end time.Time) {
	if !l.wakeEnd.IsZero() && !l.wakeEnd.After(end) {
		return
	}
	l.wakeEnd = end
	l.after(end.Sub(now), l.wakeUp)
}

func afterFunc(d time.Duration, f func()) { time.AfterFunc(d, f) }

func (l *Limiter) wakeUp() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wakeEnd = time.Time{}
	l.serve(time.Now())
}

// CancelAt gives a slot back without a sample: Sluice rejected the
// request (another zone denied), the upstream never saw it.
func (l *Limiter) CancelAt(now time.Time, _ Slot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inFlight--
	l.updateAt(now)
	l.serve(now)
}

// ReleaseAt gives a slot back at now with the request's latency.
func (l *Limiter) ReleaseAt(now time.Time, s Slot, latency time.Duration, o Outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inFlight--
	l.record(s, latency, o)
	l.updateAt(now)
	l.serve(now)
}

// overload is tolerance × baseline, the latency that reads as overload,
// rounded up: truncated, it would fall short of it (1.5 × an odd number
// of nanoseconds), and a fast 503 would not read as overload.
func (l *Limiter) overload() time.Duration {
	return time.Duration(math.Ceil(float64(l.base.value) * l.cfg.Tolerance))
}

func (l *Limiter) record(s Slot, latency time.Duration, o Outcome) {
	overload := l.overload()
	switch o {
	case Overloaded:
		latency = max(latency, overload)
	case Abandoned:
		if l.base.value == 0 || latency < overload {
			return
		}
	}
	l.iv.samples = append(l.iv.samples, latency)
	if s.calm && o != Overloaded { // a 503's latency is not one the baseline learns from
		l.iv.calm = append(l.iv.calm, latency)
	}
	if s.interval == l.iv.seq {
		l.iv.own = append(l.iv.own, latency)
		if latency >= overload {
			l.iv.ownOver++
		}
		if n := len(l.iv.own); n > growSamples && l.iv.own[n-1-growSamples] >= overload {
			l.iv.ownOver-- // no longer among the latest growSamples
		}
	}
}

// State is the limiter's state at now.
func (l *Limiter) StateAt(now time.Time) State {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.updateAt(now)
	return State{Limit: l.limit, InFlight: l.inFlight, Waiting: l.q.n, Baseline: l.base.value}
}

func (l *Limiter) startInterval(now time.Time) {
	jitter := l.cfg.Jitter * (2*l.cfg.Rand() - 1)
	l.iv.seq++
	l.iv.start = now
	l.iv.end = now.Add(time.Duration(float64(l.cfg.Interval) * (1 + jitter)))
	l.iv.samples, l.iv.calm, l.iv.own, l.iv.ownOver = l.iv.samples[:0], l.iv.calm[:0], l.iv.own[:0], 0
	l.iv.maxInFlight = l.inFlight
}

// updateAt ends the interval when its time is up, or sooner when the
// requests it admitted already show overload (overloadShown): the
// baseline learns from it, and the limit grows, shrinks or holds.
func (l *Limiter) updateAt(now time.Time) {
	if l.overloadShown() {
		l.endInterval(now, median(l.iv.own[len(l.iv.own)-growSamples:]))
		return
	}
	if now.Before(l.iv.end) {
		return
	}
	if len(l.iv.samples) < shrinkSamples {
		if now.Sub(l.iv.start) < maxInterval {
			l.iv.end = now.Add(l.cfg.Interval) // go on collecting
			return
		}
		l.startInterval(now)
		return
	}
	l.endInterval(now, median(l.iv.samples))
}

// overloadShown reports whether the interval can end early, on overload:
// at least growSamples of the requests it admitted have had their
// sample, and most of the latest growSamples reached tolerance ×
// baseline (their median did). A step to overload then shrinks the
// limit within about one upstream latency of it, not up to an interval
// or two later, however many requests admitted before the step
// answered fast, while the requests admitted before the interval (under
// a limit since changed) cannot end it early.
func (l *Limiter) overloadShown() bool {
	return l.base.value > 0 && len(l.iv.own) >= growSamples && 2*l.iv.ownOver > growSamples
}

// endInterval ends the interval at now, m being its median latency.
func (l *Limiter) endInterval(now time.Time, m time.Duration) {
	n := len(l.iv.samples)
	if len(l.iv.calm) >= shrinkSamples {
		l.base.addAt(now, median(l.iv.calm))
	} else {
		l.base.seed(now, m)
	}
	l.limit = l.next(m, n)
	l.startInterval(now)
	l.serve(now)
}

// deaf reports whether median m, after a shrink that cut the requests in
// flight by a fifth or more (or a hold since) at median l.shrunk, stayed
// within deafLow..deafHigh of it.
func (l *Limiter) deaf(m time.Duration) bool {
	return l.shrunk > 0 && float64(m) >= deafLow*float64(l.shrunk) && float64(m) <= deafHigh*float64(l.shrunk)
}

// next is the limit after an interval of n samples whose median is m.
func (l *Limiter) next(m time.Duration, n int) int {
	b := float64(l.base.value)
	tol := l.cfg.Tolerance
	// the growth band's top and middle (1.125 and 1.0625 at tolerance 1.5)
	growTop, growMid := 1+(tol-1)/growBand, 1+(tol-1)/(2*growBand)
	overloaded := b > 0 && float64(m) >= tol*b
	if !overloaded || !l.deaf(m) {
		l.shrunk = 0
	}
	switch {
	case overloaded && l.shrunk > 0: // deaf: hold
		return l.limit
	case overloaded: // aimed at the growth band's top, where it settles
		g := max(growTop*b/float64(m), minGradient)
		next := max(min(int(float64(l.limit)*g), l.limit-1), l.cfg.Min)
		if float64(next) <= deafGradient*float64(min(l.limit, l.iv.maxInFlight)) { // it cut the requests in flight
			l.shrunk = m
		}
		return next
	case n >= growSamples && 2*l.iv.maxInFlight >= l.limit && float64(m) <= growTop*b:
		// growth while latency stays in the lowest part of the tolerance
		// band, by √limit in its lower half and by one near its top (so
		// as not to overshoot into the upper band); between that and
		// tolerance × baseline the limit holds
		step := 1
		if float64(m) <= growMid*b {
			step = int(math.Ceil(math.Sqrt(float64(l.limit))))
		}
		return min(l.limit+step, l.cfg.Max)
	}
	return l.limit
}
