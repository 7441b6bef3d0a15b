package adaptive

import (
	"testing"
	"time"
)

const ms = time.Millisecond

// noJitter is a Rand that puts every interval at exactly Interval.
func noJitter() float64 { return 0.5 }

func newTest(cfg Config) *Limiter {
	if cfg.Rand == nil {
		cfg.Rand = noJitter
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	return New(cfg, t0)
}

// clock is the tests' time: every step moves it on.
type clock struct{ now time.Time }

func (c *clock) add(d time.Duration) time.Time { c.now = c.now.Add(d); return c.now }

// round runs one interval: concurrent requests at once (taken together,
// so in flight reaches concurrent), each answered after latency, n
// requests in all, then moves the clock past the interval's end.
func round(t *testing.T, l *Limiter, c *clock, n, concurrent int, latency time.Duration, o Outcome) {
	t.Helper()
	for done := 0; done < n; {
		batch := min(concurrent, n-done)
		slots := make([]Slot, 0, batch)
		for range batch {
			s, ok := l.ForceAt(c.now, 0)
			_ = ok
			slots = append(slots, s)
		}
		for _, s := range slots {
			l.ReleaseAt(c.now, s, latency, o)
		}
		done += batch
	}
	c.add(1100 * ms) // past the interval (1s) and into the next
	l.StateAt(c.now) // ends it
}

func TestLimitRules(t *testing.T) {
	type step struct {
		n, concurrent int
		latency       time.Duration
		outcome       Outcome
	}
	calm := func(k int) []step {
		s := make([]step, k)
		for i := range s {
			s[i] = step{20, 2, 10 * ms, Answered}
		}
		return s
	}
	tests := []struct {
		name  string
		cfg   Config
		steps []step
		check func(t *testing.T, s State)
	}{
		{"starts at initial", Config{Min: 4, Max: 100, Initial: 20}, nil,
			func(t *testing.T, s State) { want(t, "limit", s.Limit, 20) }},
		{"no growth without demand: in flight stays under half the limit",
			Config{Min: 4, Max: 100, Initial: 20}, calm(50),
			func(t *testing.T, s State) { want(t, "limit", s.Limit, 20) }},
		{"grows where in flight reached half the limit with 20 samples",
			Config{Min: 4, Max: 100, Initial: 20},
			append(calm(3), step{20, 10, 10 * ms, Answered}),
			func(t *testing.T, s State) { want(t, "limit", s.Limit, 25) }},
		{"no growth with fewer than 20 samples",
			Config{Min: 4, Max: 100, Initial: 20},
			append(calm(3), step{19, 10, 10 * ms, Answered}),
			func(t *testing.T, s State) { want(t, "limit", s.Limit, 20) }},
		{"growth stops at events",
			Config{Min: 4, Max: 22, Initial: 20},
			append(calm(3), step{40, 20, 10 * ms, Answered}, step{40, 20, 10 * ms, Answered}),
			func(t *testing.T, s State) { want(t, "limit", s.Limit, 22) }},
		{"grows by one near the growth band's top",
			Config{Min: 4, Max: 100, Initial: 20},
			append(calm(3), step{20, 10, 11 * ms, Answered}), // over 1.0625 × 10ms, within 1.125 ×
			func(t *testing.T, s State) { want(t, "limit", s.Limit, 21) }},
		{"shrinks when latency passes tolerance × baseline, by the gradient to the growth band's top",
			Config{Min: 4, Max: 100, Initial: 20},
			append(calm(3), step{20, 10, 20 * ms, Answered}), // 1.125 × 10ms / 20ms = 0.5625
			func(t *testing.T, s State) { want(t, "limit", s.Limit, 11) }},
		{"at most by half in one interval",
			Config{Min: 4, Max: 100, Initial: 20},
			append(calm(3), step{20, 10, 500 * ms, Answered}),
			func(t *testing.T, s State) { want(t, "limit", s.Limit, 10) }},
		{"never below min",
			Config{Min: 8, Max: 100, Initial: 10},
			append(calm(3), step{20, 5, 500 * ms, Answered}, step{20, 5, 500 * ms, Answered}),
			func(t *testing.T, s State) { want(t, "limit", s.Limit, 8) }},
		{"a shrink that cut in flight and left the latency as it was holds: the upstream got slower",
			Config{Min: 4, Max: 100, Initial: 20},
			append(calm(3), step{20, 20, 20 * ms, Answered}, step{20, 20, 20 * ms, Answered}, step{20, 20, 21 * ms, Answered}),
			func(t *testing.T, s State) { want(t, "limit", s.Limit, 11) }},
		{"held deaf, a latency past the band shrinks again",
			Config{Min: 4, Max: 100, Initial: 20},
			append(calm(3), step{20, 20, 20 * ms, Answered}, step{20, 20, 20 * ms, Answered}, step{20, 20, 30 * ms, Answered}),
			func(t *testing.T, s State) { want(t, "limit", s.Limit, 5) }}, // 11 × 0.5 (1.125 × 10 / 30, at most by half)
		{"a shrink that left the limit above in flight shows nothing: it shrinks on until it binds",
			Config{Min: 4, Max: 100, Initial: 20},
			append(calm(3), step{20, 10, 20 * ms, Answered}, step{20, 10, 20 * ms, Answered}, step{20, 10, 20 * ms, Answered},
				step{20, 10, 20 * ms, Answered}),
			func(t *testing.T, s State) { want(t, "limit", s.Limit, 6) }}, // 20, 11, then 6: under 0.8 × 10 in flight, held
		{"a latency that falls with the limit keeps shrinking it: a queue",
			Config{Min: 4, Max: 100, Initial: 20},
			append(calm(3), step{20, 10, 40 * ms, Answered}, step{20, 10, 25 * ms, Answered}),
			func(t *testing.T, s State) { want(t, "limit", s.Limit, 5) }}, // 20 × 0.5, then 10 × 0.5 (1.125 × 10 / 25 = 0.45)
		{"after a shrink that left the limit above in flight the limit does not hold",
			Config{Min: 4, Max: 100, Initial: 20},
			append(calm(3), step{20, 10, 16 * ms, Answered}, step{20, 10, 16 * ms, Answered}),
			func(t *testing.T, s State) { want(t, "limit", s.Limit, 9) }}, // 20 × 11.25/16 → 14, then 14 × 11.25/16 → 9
		{"holds between the growth band and tolerance",
			Config{Min: 4, Max: 100, Initial: 20},
			append(calm(3), step{20, 10, 12 * ms, Answered}), // above 1.125 × 10ms, under 1.5 ×
			func(t *testing.T, s State) { want(t, "limit", s.Limit, 20) }},
		{"503 and 504 count as at least tolerance × baseline",
			Config{Min: 4, Max: 100, Initial: 20},
			append(calm(3), step{20, 2, 1 * ms, Overloaded}),
			func(t *testing.T, s State) { want(t, "limit", s.Limit, 15) }}, // 20 × 1.125 / 1.5
		{"a fast 503 counts as overload whatever the baseline's rounding",
			Config{Min: 4, Max: 100, Initial: 20},
			[]step{{20, 2, 10*ms + 1, Answered}, {20, 2, 10*ms + 1, Answered}, {20, 2, 10*ms + 1, Answered}, {20, 2, 1 * ms, Overloaded}},
			func(t *testing.T, s State) { want(t, "limit", s.Limit, 14) }}, // 1.5 × 10.000001ms is 15.0000015ms, the sample rounded up to 15.000002ms: 20 × a hair under 0.75
		{"a client that left early records nothing",
			Config{Min: 4, Max: 100, Initial: 20},
			append(calm(3), step{20, 10, 1 * ms, Abandoned}),
			func(t *testing.T, s State) { want(t, "limit", s.Limit, 20) }},
		{"a client that left after tolerance × baseline counts",
			Config{Min: 4, Max: 100, Initial: 20},
			append(calm(3), step{20, 2, 30 * ms, Abandoned}),
			func(t *testing.T, s State) { want(t, "limit", s.Limit, 10) }},
		{"one slow sample at a low rate collapses nothing",
			Config{Min: 4, Max: 100, Initial: 20},
			append(calm(3), step{1, 1, 5 * time.Second, Answered}, step{1, 1, 5 * time.Second, Answered}),
			func(t *testing.T, s State) { want(t, "limit", s.Limit, 20) }},
		{"baseline learned from calm intervals",
			Config{Min: 4, Max: 100, Initial: 20}, calm(3),
			func(t *testing.T, s State) { want(t, "baseline", s.Baseline, 10*ms) }},
		{"no ratchet: intervals over half the limit do not lift the baseline",
			Config{Min: 4, Max: 100, Initial: 20},
			append(calm(3), step{40, 20, 14 * ms, Answered}, step{40, 20, 14 * ms, Answered}, step{40, 20, 14 * ms, Answered}),
			func(t *testing.T, s State) { want(t, "baseline", s.Baseline, 10*ms) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newTest(tt.cfg)
			c := &clock{t0}
			for _, s := range tt.steps {
				round(t, l, c, s.n, s.concurrent, s.latency, s.outcome)
			}
			tt.check(t, l.StateAt(c.now))
		})
	}
}

func want[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func TestRecoversAfterOverload(t *testing.T) {
	l := newTest(Config{Min: 4, Max: 100, Initial: 40})
	c := &clock{t0}
	for range 3 {
		round(t, l, c, 20, 2, 10*ms, Answered)
	}
	for range 3 {
		round(t, l, c, 40, 20, 100*ms, Answered)
	}
	low := l.StateAt(c.now).Limit
	if low >= 40 {
		t.Fatalf("limit after overload = %d, want below 40", low)
	}
	for range 5 {
		round(t, l, c, 40, l.StateAt(c.now).Limit, 10*ms, Answered)
	}
	if got := l.StateAt(c.now).Limit; got <= low {
		t.Errorf("limit after the upstream recovered = %d, want above %d", got, low)
	}
}

func TestJitteredIntervals(t *testing.T) {
	ends := map[time.Duration]bool{}
	for _, r := range []float64{0, 0.5, 0.999} {
		l := New(Config{Max: 10, Interval: time.Second, Jitter: 0.2, Rand: func() float64 { return r }}, t0)
		ends[l.iv.end.Sub(t0)] = true
		if d := l.iv.end.Sub(t0); d < 800*ms || d > 1200*ms {
			t.Errorf("interval with rand %v = %v, want within 20%% of 1s", r, d)
		}
	}
	if len(ends) != 3 {
		t.Errorf("intervals %v: want them to differ with the random draw", ends)
	}
}

func TestDefaults(t *testing.T) {
	for _, tt := range []struct{ events, min, initial int }{{100, 4, 20}, {3, 3, 3}, {10, 4, 10}} {
		l := New(Config{Max: tt.events}, t0)
		if l.cfg.Min != tt.min || l.cfg.Initial != tt.initial || l.cfg.Tolerance != DefaultTolerance {
			t.Errorf("events %d: min %d initial %d tolerance %v, want %d %d %v",
				tt.events, l.cfg.Min, l.cfg.Initial, l.cfg.Tolerance, tt.min, tt.initial, DefaultTolerance)
		}
	}
}

func TestAcquireSheds(t *testing.T) {
	// limit 10, two classes, reserve 20%: critical 10, bulk 8
	l := newTest(Config{Min: 4, Max: 100, Initial: 10, Classes: 2, Reserve: 0.2})
	var held []Slot
	for range 8 {
		s, ok := l.AcquireAt(t0, 1)
		if !ok {
			t.Fatalf("bulk request %d shed under its share", len(held)+1)
		}
		held = append(held, s)
	}
	if _, ok := l.AcquireAt(t0, 1); ok {
		t.Fatal("bulk request over its share of 8 admitted")
	}
	for range 2 {
		s, ok := l.AcquireAt(t0, 0)
		if !ok {
			t.Fatal("critical request shed inside the reserve")
		}
		held = append(held, s)
	}
	if _, ok := l.AcquireAt(t0, 0); ok {
		t.Fatal("critical request over the limit admitted")
	}
	if got := l.Share(1); got != 8 {
		t.Errorf("bulk share = %d, want 8", got)
	}
	l.CancelAt(t0, held[0])
	if _, ok := l.AcquireAt(t0, 1); ok {
		t.Error("bulk admitted while 9 are in flight, over its share of 8")
	}
	if _, ok := l.AcquireAt(t0, 0); !ok {
		t.Error("critical shed with a slot free")
	}
	if s := l.StateAt(t0); s.InFlight != 10 {
		t.Errorf("in flight = %d, want 10", s.InFlight)
	}
}

func TestForceTakesASlotAndSaysWhetherItFit(t *testing.T) {
	l := newTest(Config{Min: 1, Max: 10, Initial: 1})
	if _, fits := l.ForceAt(t0, 0); !fits {
		t.Error("first slot of 1: want it to fit")
	}
	if _, fits := l.ForceAt(t0, 0); fits {
		t.Error("second slot of 1: want it not to fit")
	}
	if s := l.StateAt(t0); s.InFlight != 2 {
		t.Errorf("in flight = %d, want 2: a dry run sheds nothing", s.InFlight)
	}
}

func TestReconfigureKeepsState(t *testing.T) {
	l := newTest(Config{Min: 4, Max: 100, Initial: 10, Classes: 2, Reserve: 0.2})
	s, _ := l.AcquireAt(t0, 0)
	l.Reconfigure(2, 0.5)
	if got := l.Share(1); got != 5 {
		t.Errorf("bulk share after reserve 50%% = %d, want 5", got)
	}
	st := l.StateAt(t0)
	if st.InFlight != 1 || st.Limit != 10 {
		t.Errorf("after Reconfigure: %+v, want in flight 1, limit 10", st)
	}
	l.ReleaseAt(t0, s, ms, Answered)
}

// TestSlotShare: a slot carries its class's share and the requests in
// flight once it was taken, a granted ticket's too, for its RateLimit
// member.
func TestSlotShare(t *testing.T) {
	l := newTest(Config{Min: 10, Initial: 10, Max: 10, Classes: 2, Reserve: 0.2})
	var held []Slot
	for i := range 8 {
		s, ok := l.AcquireAt(t0, 1)
		if !ok || s.Share != 8 || s.InFlight != i+1 || s.Remaining() != 7-i {
			t.Fatalf("class 1, request %d: %+v ok %v; want share 8, in flight %d, remaining %d", i, s, ok, i+1, 7-i)
		}
		held = append(held, s)
	}
	if s, ok := l.AcquireAt(t0, 0); !ok || s.Share != 10 || s.InFlight != 9 || s.Remaining() != 1 {
		t.Fatalf("class 0: %+v ok %v; want share 10, in flight 9, remaining 1", s, ok)
	}
	tk := l.EnqueueAt(t0, 1, time.Second) // over class 1's share: waits
	l.CancelAt(t0, held[0])
	l.CancelAt(t0, held[1]) // in flight 7: class 1 fits again
	<-tk.Ready()
	if s := tk.Slot(); s.Share != 8 || s.InFlight != 8 || s.Remaining() != 0 {
		t.Errorf("granted ticket: %+v; want share 8, in flight 8, remaining 0", s)
	}
}

// atBaseline is a limiter of cfg and its clock after three intervals of
// 20 requests answered in latency, concurrent at a time: latency is its
// baseline.
func atBaseline(t *testing.T, cfg Config, concurrent int, latency time.Duration) (*Limiter, *clock) {
	t.Helper()
	l := newTest(cfg)
	c := &clock{t0}
	for range 3 {
		round(t, l, c, 20, concurrent, latency, Answered)
	}
	return l, c
}

// TestOverloadEndsTheIntervalEarlyAfterFastAnswers: a step to overload
// in the middle of an interval ends it once most of the latest
// growSamples of its own requests reach tolerance × baseline, however
// many it admitted before the step answered fast.
func TestOverloadEndsTheIntervalEarlyAfterFastAnswers(t *testing.T) {
	l, c := atBaseline(t, Config{Min: 4, Max: 100, Initial: 20}, 2, 10*ms)
	before := l.StateAt(c.now).Limit
	for range 30 { // before the step
		s, _ := l.ForceAt(c.now, 0)
		l.ReleaseAt(c.now, s, 10*ms, Answered)
	}
	slow := make([]Slot, 11)
	for i := range slow {
		slow[i], _ = l.ForceAt(c.now, 0)
	}
	c.add(10 * ms)
	for i, s := range slow {
		l.ReleaseAt(c.now, s, 30*ms, Answered)
		if i == len(slow)-2 {
			want(t, "limit with 10 of the latest 20 own samples 3 × the baseline", l.StateAt(c.now).Limit, before)
		}
	}
	want(t, "limit with 11 of the latest 20 own samples 3 × the baseline", l.StateAt(c.now).Limit, before/2)
}

// TestReconfigureRecountsOverload: a reload that lowers the tolerance
// counts the interval's latest samples against the new one: samples
// under the old tolerance and over the new one end the interval early.
func TestReconfigureRecountsOverload(t *testing.T) {
	l, c := atBaseline(t, Config{Min: 4, Max: 100, Initial: 20}, 2, 10*ms)
	before := l.StateAt(c.now).Limit
	answer := func(n int) {
		for range n {
			s, _ := l.ForceAt(c.now, 0)
			l.ReleaseAt(c.now, s, 13*ms, Answered) // under 1.5 × the baseline, over 1.2 ×
		}
	}
	answer(18)
	l.Reconfigure(1.2, 0)
	answer(1)
	want(t, "limit with 19 samples", l.StateAt(c.now).Limit, before)
	answer(1)
	if got := l.StateAt(c.now).Limit; got >= before {
		t.Errorf("limit %d after 20 samples over the new tolerance, want it under %d", got, before)
	}
}

// TestOverloadEndsTheIntervalEarly: once growSamples of the requests an
// interval admitted have their samples, most at or above tolerance ×
// baseline, the limit shrinks at once rather than at the interval's end;
// the samples of requests admitted in an earlier interval (under the
// limit before) cannot end it early.
func TestOverloadEndsTheIntervalEarly(t *testing.T) {
	l, c := atBaseline(t, Config{Min: 4, Max: 100, Initial: 20}, 2, 10*ms)
	take := func(n int) []Slot {
		slots := make([]Slot, n)
		for i := range slots {
			slots[i], _ = l.ForceAt(c.now, 0)
		}
		return slots
	}
	earlier := take(20)
	round(t, l, c, 20, 2, 10*ms, Answered) // ends the interval the 20 were taken in
	before := l.StateAt(c.now).Limit
	c.add(10 * ms)
	for _, s := range earlier {
		l.ReleaseAt(c.now, s, 30*ms, Answered)
	}
	want(t, "limit after samples of an earlier interval's requests", l.StateAt(c.now).Limit, before)

	own := take(20)
	c.add(10 * ms)
	for i, s := range own {
		latency := 30 * ms
		if i%3 == 0 {
			latency = 10 * ms // a minority under tolerance × baseline
		}
		l.ReleaseAt(c.now, s, latency, Answered)
		if i == len(own)-2 {
			want(t, "limit with 19 of the interval's own samples", l.StateAt(c.now).Limit, before)
		}
	}
	want(t, "limit with 20, most of them 3 × the baseline", l.StateAt(c.now).Limit, before/2)
}
