package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// phaseSpec is one phase of the drill: arrivals at times × capacity for
// dur, the upstream halved or not.
type phaseSpec struct {
	name   string
	times  float64 // of capacity
	halved bool    // the upstream at half its capacity
	dur    time.Duration
	steady bool // the steady phase the limit's coefficient of variation is read from
}

// parsePhases reads "m[/2][@dur],...": m a multiple of capacity, /2 the
// upstream halved during the phase, @dur its length (else def); lengths
// are whole seconds, since the time series is per second.
func parsePhases(s string, def time.Duration) []phaseSpec {
	var out []phaseSpec
	for _, p := range strings.Split(s, ",") {
		spec := phaseSpec{dur: def}
		if m, d, ok := strings.Cut(p, "@"); ok {
			dur, err := time.ParseDuration(d)
			check(err)
			p, spec.dur = m, dur
		}
		spec.name = p + "×"
		if m, ok := strings.CutSuffix(p, "/2"); ok {
			p, spec.halved, spec.name = m, true, m+"× half"
		}
		f, err := strconv.ParseFloat(p, 64)
		check(err)
		spec.times = f
		if spec.dur < time.Second || spec.dur%time.Second != 0 {
			check(fmt.Errorf("phase %q: its length must be whole seconds", p))
		}
		out = append(out, spec)
	}
	return out
}

// withSteady is phases with a steady phase at 3× of d inserted after the
// first plain 3× phase (which settles the limit), or at the end.
func withSteady(phases []phaseSpec, d time.Duration) []phaseSpec {
	steady := phaseSpec{name: "3× steady", times: 3, dur: d, steady: true}
	for i, p := range phases {
		if p.times == 3 && !p.halved {
			return append(phases[:i+1:i+1], append([]phaseSpec{steady}, phases[i+1:]...)...)
		}
	}
	return append(phases, steady)
}

// result is one request's end.
type result struct {
	phase, sec int // its phase (-1: the warm-up) and second within it, by when it was due
	critical   bool
	status     int // 0: no answer within the deadline
	latency    time.Duration
}

// schedule is a run's timeline: the warm-up, then the phases, back to
// back, offsets from the run's start.
type schedule struct {
	warmup time.Duration
	phases []phaseSpec
	starts []time.Duration // each phase's start
	end    time.Duration
}

func newSchedule(warmup time.Duration, phases []phaseSpec) schedule {
	s := schedule{warmup: warmup, phases: phases}
	at := warmup
	for _, p := range phases {
		s.starts = append(s.starts, at)
		at += p.dur
	}
	s.end = at
	return s
}

// locate is the phase (-1: the warm-up or after the end) and second
// within it of offset at.
func (s schedule) locate(at time.Duration) (phase, sec int) {
	for i, p := range s.phases {
		if at >= s.starts[i] && at < s.starts[i]+p.dur {
			return i, int((at - s.starts[i]) / time.Second)
		}
	}
	return -1, 0
}

// drive sends open-loop arrivals (at a constant rate per phase, whatever
// the answers) from start along s: the warm-up at 0.5× capacity, then
// each phase, alternating between the instances, a share critical of them
// critical (spread evenly), each with the deadline; it halves and
// restores up as the phases say, and returns every request's end once
// all ended, with how late the sender was, at most, in each second of
// each phase (a sender late by more than a few ms is a machine too busy
// to drive the drill: that second's figures are the machine's).
func drive(cl *client, instances int, s schedule, capacity, critical float64, deadline time.Duration, up *upstream, start time.Time) ([]result, [][]time.Duration) {
	lags := make([][]time.Duration, len(s.phases))
	for i, p := range s.phases {
		lags[i] = make([]time.Duration, int(p.dur/time.Second))
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var results []result
	perMille := int(critical*1000 + 0.5)
	k := 0 // requests sent so far
	segment := func(phase int, from, d time.Duration, rate float64, halved bool) {
		if wait := time.Until(start.Add(from)); wait > 0 {
			time.Sleep(wait)
		}
		up.setHalved(halved)
		interval := float64(time.Second) / rate
		n := int(d.Seconds() * rate)
		for i := range n {
			due := from + time.Duration(float64(i)*interval)
			if wait := time.Until(start.Add(due)); wait > 0 {
				time.Sleep(wait)
			}
			sec := int((due - from) / time.Second)
			if phase >= 0 {
				lags[phase][sec] = max(lags[phase][sec], time.Since(start.Add(due)))
			}
			crit := (k+1)*perMille/1000 > k*perMille/1000
			inst := k % instances
			k++
			wg.Go(func() {
				sent := time.Now()
				status := cl.do(inst, crit, sent.Add(deadline))
				r := result{phase: phase, sec: sec, critical: crit, status: status}
				if status > 0 {
					r.latency = time.Since(sent)
				}
				if phase < 0 {
					return // the warm-up is not measured
				}
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			})
		}
	}
	segment(-1, 0, s.warmup, capacity*0.5, false)
	for i, p := range s.phases {
		fmt.Fprintf(os.Stderr, "drill:   %s for %v\n", p.name, p.dur)
		segment(i, s.starts[i], p.dur, capacity*p.times, p.halved)
	}
	if wait := time.Until(start.Add(s.end)); wait > 0 {
		time.Sleep(wait)
	}
	up.setHalved(false)
	wg.Wait()
	return results, lags
}
