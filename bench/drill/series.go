package main

import (
	"math"
	"slices"
	"time"
)

// bucket is one second of one phase: the requests due in it, the
// upstream's times of those that reached it then, and the adaptive
// zone's readings taken in it (summed over the instances).
type bucket struct {
	sent, ok, shed, timeout int
	crit, critOK            int
	lat, up                 []time.Duration // admitted (2xx) latencies; times in the upstream
	limit, inFlight         []float64
	lag                     time.Duration // how late the sender was, at most
}

// stats are a bucket's or a phase's figures; NaN where there is nothing
// to read them from.
type stats struct {
	secs                  float64
	sent, ok, shed, tout  int
	crit, critOK          int
	p99, upP99            float64 // ms
	limit, inFlight       float64 // means
	limitCV               float64 // of the readings' sum over the instances
	instCV                []float64
	goodput, shedPct      float64 // req/s; % of sent
	toutPct, critPct      float64 // % of sent; % of critical served
	bulkPct               float64 // % of the served that were not critical
	upSamples, admitCount int
	lag                   time.Duration // how late the sender was, at most
}

// runResult is one limiter's run: its phases, and per phase its seconds.
type runResult struct {
	limiter string
	sched   schedule
	buckets [][]*bucket // per phase, per second
	polls   []poll
	phase   []stats
}

// collect sorts a run's requests, upstream times and readings into
// per-second buckets and sums up each phase.
func collect(limiter string, s schedule, results []result, lags [][]time.Duration, stamps []stamp, polls []poll) *runResult {
	r := &runResult{limiter: limiter, sched: s, polls: polls}
	for _, p := range s.phases {
		n := int(p.dur / time.Second)
		bs := make([]*bucket, n)
		for i := range bs {
			bs[i] = &bucket{lag: lags[len(r.buckets)][i]}
		}
		r.buckets = append(r.buckets, bs)
	}
	for _, x := range results {
		b := r.buckets[x.phase][x.sec]
		b.sent++
		ok := x.status >= 200 && x.status < 300
		switch {
		case ok:
			b.ok++
			b.lat = append(b.lat, x.latency)
		case x.status == 0:
			b.timeout++
		default:
			b.shed++
		}
		if x.critical {
			b.crit++
			if ok {
				b.critOK++
			}
		}
	}
	for _, st := range stamps {
		if ph, sec := s.locate(st.at); ph >= 0 {
			r.buckets[ph][sec].up = append(r.buckets[ph][sec].up, st.took)
		}
	}
	for _, p := range polls {
		if ph, sec := s.locate(p.at); ph >= 0 {
			b := r.buckets[ph][sec]
			b.limit = append(b.limit, float64(sum(p.limits)))
			b.inFlight = append(b.inFlight, float64(sum(p.inFlight)))
		}
	}
	for i := range s.phases {
		st := statsOf(r.buckets[i])
		st.instCV = r.instanceCVs(i)
		r.phase = append(r.phase, st)
	}
	return r
}

// instanceCVs are each instance's limit's coefficient of variation over
// phase i's readings.
func (r *runResult) instanceCVs(i int) []float64 {
	from, to := r.sched.starts[i], r.sched.starts[i]+r.sched.phases[i].dur
	var per [][]float64
	for _, p := range r.polls {
		if p.at < from || p.at >= to {
			continue
		}
		if per == nil {
			per = make([][]float64, len(p.limits))
		}
		for j, l := range p.limits {
			per[j] = append(per[j], float64(l))
		}
	}
	var cvs []float64
	for _, xs := range per {
		_, cv := meanCV(xs)
		cvs = append(cvs, cv)
	}
	return cvs
}

// statsOf sums up buckets (one second each).
func statsOf(bs []*bucket) stats {
	var s stats
	var lat, up []time.Duration
	var limits, inFlight []float64
	for _, b := range bs {
		s.sent += b.sent
		s.ok += b.ok
		s.shed += b.shed
		s.tout += b.timeout
		s.crit += b.crit
		s.critOK += b.critOK
		lat = append(lat, b.lat...)
		up = append(up, b.up...)
		limits = append(limits, b.limit...)
		inFlight = append(inFlight, b.inFlight...)
		s.lag = max(s.lag, b.lag)
	}
	s.secs = float64(len(bs))
	s.p99 = p99ms(lat)
	s.upP99 = p99ms(up)
	s.limit, s.limitCV = meanCV(limits)
	s.inFlight, _ = meanCV(inFlight)
	s.goodput = float64(s.ok) / max(s.secs, 1)
	n := float64(max(s.sent, 1))
	s.shedPct = float64(s.shed) / n * 100
	s.toutPct = float64(s.tout) / n * 100
	s.critPct = nanIf(s.crit == 0, float64(s.critOK)/float64(max(s.crit, 1))*100)
	s.bulkPct = nanIf(s.ok == 0, float64(s.ok-s.critOK)/float64(max(s.ok, 1))*100)
	s.upSamples, s.admitCount = len(up), len(lat)
	return s
}

// p99ms is the 99th percentile (nearest rank) of ds in ms; NaN for none.
func p99ms(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return math.NaN()
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(0.99*float64(len(s)))) - 1
	return float64(s[max(i, 0)]) / float64(time.Millisecond)
}

// meanCV is the mean and coefficient of variation of xs; NaN for none.
func meanCV(xs []float64) (mean, cv float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	var v float64
	for _, x := range xs {
		v += (x - mean) * (x - mean)
	}
	if mean == 0 {
		return 0, 0
	}
	return mean, math.Sqrt(v/float64(len(xs))) / mean
}

func nanIf(cond bool, x float64) float64 {
	if cond {
		return math.NaN()
	}
	return x
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// recovery is the first second of phase i from which cond holds for hold
// seconds in a row (or to the phase's end), and whether there is one.
func (r *runResult) recovery(i, hold int, cond func(s stats) bool) (int, bool) {
	bs := r.buckets[i]
	for k := range bs {
		ok := true
		for j := k; j < min(k+hold, len(bs)); j++ {
			if !cond(statsOf(bs[j : j+1])) {
				ok = false
				break
			}
		}
		if ok {
			return k, true
		}
	}
	return 0, false
}
