package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// The targets' figures.
const (
	lowShedMax      = 0.1  // % not served at 0.5×
	goodputMin      = 0.9  // of capacity, at 3× and 10×, and restored
	p99Factor       = 2.0  // admitted p99 over the unloaded p99, at 3× and halved
	criticalMin     = 99.5 // % of critical served at 3×
	bulkMax         = 1.0  // % of the served not critical at 10×
	halvedWithin    = 5    // s until p99 is back under p99Factor × unloaded
	restoredWithin  = 10   // s until goodput is back to goodputMin
	staticShare     = 0.9  // of the best static limit's goodput
	highP99Share    = 0.5  // "far below": at most this share of the too-high limit's p99
	lowGoodputTimes = 2.0  // "far above": at least this many times the too-low limit's goodput
	cvMax           = 0.2  // the limit's coefficient of variation at a steady 3×
	steadyLength    = 30   // s the target reads the coefficient of variation over
	holdSeconds     = 3    // a recovery holds this many seconds in a row (or to the phase's end)
	busyLag         = 50   // ms: a sender this late says the machine, not only the limiter, was measured
)

// roles are the phases the targets read, by index (-1: not run).
type roles struct {
	low, over3, halved, restored, over10, steady int
}

func rolesOf(phases []phaseSpec) roles {
	r := roles{-1, -1, -1, -1, -1, -1}
	for i, p := range phases {
		switch {
		case p.steady:
			if r.steady < 0 {
				r.steady = i
			}
		case p.halved:
			if r.halved < 0 {
				r.halved = i
				if i+1 < len(phases) && !phases[i+1].halved && !phases[i+1].steady {
					r.restored = i + 1
				}
			}
		case p.times < 1:
			if r.low < 0 {
				r.low = i
			}
		case p.times == 3:
			if r.over3 < 0 && i != r.restored {
				r.over3 = i
			}
		case p.times == 10:
			if r.over10 < 0 {
				r.over10 = i
			}
		}
	}
	return r
}

// verdict is one row of the targets table.
type verdict struct {
	target, measured string
	met              int // 1 met, 0 missed, -1 not measured
}

func yes(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (v verdict) metString() string {
	switch v.met {
	case 1:
		return "met"
	case 0:
		return "**missed**"
	}
	return "–"
}

// phaseOf is limiter name's stats in the phase that is the adaptive
// run's phase i (the same place among the phases but the steady one,
// which only the adaptive limiter runs), and whether it ran.
func phaseOf(runs map[string]*runResult, name string, i int) (stats, bool) {
	r, a := runs[name], runs["adaptive"]
	if r == nil {
		return stats{}, false
	}
	k := ordinal(a.sched.phases, i)
	for j := range r.sched.phases {
		if !r.sched.phases[j].steady && ordinal(r.sched.phases, j) == k && r.sched.phases[j].name == a.sched.phases[i].name {
			return r.phase[j], true
		}
	}
	return stats{}, false
}

// ordinal is phase i's place among phases but the steady ones.
func ordinal(phases []phaseSpec, i int) int {
	k := 0
	for _, p := range phases[:i] {
		if !p.steady {
			k++
		}
	}
	return k
}

// evaluate judges the adaptive run against the targets, beside the
// others of the same run.
func evaluate(runs map[string]*runResult, capacity float64) []verdict {
	a := runs["adaptive"]
	notRun := func(target, why string) verdict { return verdict{target, why, -1} }
	if a == nil {
		return []verdict{notRun("every target", "the adaptive limiter was not run")}
	}
	ro := rolesOf(a.sched.phases)
	ph := func(i int) stats { return a.phase[i] }
	var out []verdict
	unloaded := math.NaN()
	if ro.low >= 0 {
		unloaded = ph(ro.low).p99
	}
	bar := p99Factor * unloaded

	t := fmt.Sprintf("0.5× after the %v warm-up: at most %.1f%% shed (any request not served)", a.sched.warmup, lowShedMax)
	if ro.low < 0 {
		out = append(out, notRun(t, "no 0.5× phase"))
	} else {
		s := ph(ro.low)
		lost := float64(s.shed+s.tout) / float64(max(s.sent, 1)) * 100
		out = append(out, verdict{t, fmt.Sprintf("%.2f%% shed, %.2f%% timed out, of %d", s.shedPct, s.toutPct, s.sent) + busy(a, ro.low), yes(lost <= lowShedMax)})
	}

	goodput := func(label string, i int) verdict {
		t := fmt.Sprintf("%s: goodput ≥ %.0f%% of capacity", label, goodputMin*100)
		if i < 0 {
			return notRun(t, "no "+label+" phase")
		}
		s := ph(i)
		return verdict{t, fmt.Sprintf("%.0f req/s, %.1f%% of %.0f", s.goodput, s.goodput/capacity*100, capacity) + busy(a, i), yes(s.goodput >= goodputMin*capacity)}
	}
	out = append(out, goodput("3×", ro.over3))

	t = fmt.Sprintf("3×: admitted p99 ≤ %.0f× the unloaded p99 (the 0.5× phase's)", p99Factor)
	if ro.over3 < 0 || math.IsNaN(unloaded) {
		out = append(out, notRun(t, "no 3× or 0.5× phase"))
	} else {
		s := ph(ro.over3)
		m := fmt.Sprintf("%.0f ms against %.0f ms unloaded: %.1f× (upstream's own p99 %.0f ms", s.p99, unloaded, s.p99/unloaded, s.upP99)
		if bs := a.buckets[ro.over3]; len(bs) > 1 {
			m += fmt.Sprintf("; the phase but its first second: %.0f ms, %.1f×", statsOf(bs[1:]).p99, statsOf(bs[1:]).p99/unloaded)
		}
		out = append(out, verdict{t, m + ")" + busy(a, ro.low, ro.over3), yes(s.p99 <= bar)})
	}

	t = fmt.Sprintf("3×: critical requests ≥ %.1f%% served", criticalMin)
	if ro.over3 < 0 {
		out = append(out, notRun(t, "no 3× phase"))
	} else {
		s := ph(ro.over3)
		out = append(out, verdict{t, fmt.Sprintf("%.2f%% of %d", s.critPct, s.crit) + busy(a, ro.over3), yes(s.critPct >= criticalMin)})
	}

	out = append(out, goodput("10×", ro.over10))
	t = fmt.Sprintf("10×: ≤ %.0f%% of admitted requests not critical", bulkMax)
	if ro.over10 < 0 {
		out = append(out, notRun(t, "no 10× phase"))
	} else {
		s := ph(ro.over10)
		out = append(out, verdict{t, fmt.Sprintf("%.2f%% of %d (critical served: %.1f%%)", s.bulkPct, s.ok, s.critPct) + busy(a, ro.over10), yes(s.bulkPct <= bulkMax)})
	}

	t = fmt.Sprintf("3× with capacity halved: admitted p99 back under %.0f× unloaded within %d s", p99Factor, halvedWithin)
	if ro.halved < 0 || math.IsNaN(unloaded) {
		out = append(out, notRun(t, "no halved or 0.5× phase"))
	} else {
		k, ok := a.recovery(ro.halved, holdSeconds, func(s stats) bool { return s.p99 <= bar })
		v := recoveryVerdict(t, k, ok, halvedWithin, a.sched.phases[ro.halved], fmt.Sprintf("p99 ≤ %.0f ms", bar), perSecond(a.buckets[ro.halved], func(s stats) float64 { return s.p99 }, "%.0f"))
		v.measured += busy(a, ro.low, ro.halved)
		out = append(out, v)
	}

	t = fmt.Sprintf("restored: goodput back to %.0f%% of capacity within %d s", goodputMin*100, restoredWithin)
	if ro.restored < 0 {
		out = append(out, notRun(t, "no phase after the halved one"))
	} else {
		k, ok := a.recovery(ro.restored, holdSeconds, func(s stats) bool { return s.goodput >= goodputMin*capacity })
		v := recoveryVerdict(t, k, ok, restoredWithin, a.sched.phases[ro.restored], fmt.Sprintf("goodput ≥ %.0f/s", goodputMin*capacity), perSecond(a.buckets[ro.restored], func(s stats) float64 { return s.goodput }, "%.0f"))
		v.measured += busy(a, ro.restored)
		out = append(out, v)
	}

	// beside the static limits, at 3× and 10×
	type cmpRow struct {
		target string
		judge  func(ad stats, p phaseSpec, i int) (string, bool, bool) // measured, met, ran
	}
	rows := []cmpRow{
		{fmt.Sprintf("goodput within %.0f%% of the best static limit's (3×, 10×)", (1-staticShare)*100), func(ad stats, p phaseSpec, i int) (string, bool, bool) {
			best, bestName := -1.0, ""
			for _, n := range []string{"static", "static_high", "static_low"} {
				if s, ok := phaseOf(runs, n, i); ok && s.goodput > best {
					best, bestName = s.goodput, n
				}
			}
			if best < 0 {
				return "", false, false
			}
			return fmt.Sprintf("%s %.0f against %.0f (%s): %.2f×", p.name, ad.goodput, best, bestName, ad.goodput/best), ad.goodput >= staticShare*best, true
		}},
		{fmt.Sprintf("admitted p99 far below (≤ %.1f×) the static limit 4× too high's (3×, 10×)", highP99Share), func(ad stats, p phaseSpec, i int) (string, bool, bool) {
			s, ok := phaseOf(runs, "static_high", i)
			if !ok {
				return "", false, false
			}
			return fmt.Sprintf("%s %.0f against %.0f ms: %.2f×", p.name, ad.p99, s.p99, ad.p99/s.p99), ad.p99 <= highP99Share*s.p99, true
		}},
		{fmt.Sprintf("goodput far above (≥ %.0f×) the static limit 4× too low's (3×, 10×)", lowGoodputTimes), func(ad stats, p phaseSpec, i int) (string, bool, bool) {
			s, ok := phaseOf(runs, "static_low", i)
			if !ok {
				return "", false, false
			}
			return fmt.Sprintf("%s %.0f against %.0f: %.1f×", p.name, ad.goodput, s.goodput, ad.goodput/math.Max(s.goodput, 1e-9)), ad.goodput >= lowGoodputTimes*s.goodput, true
		}},
	}
	for _, row := range rows {
		var parts []string
		met, ran := 1, false
		for _, i := range []int{ro.over3, ro.over10} {
			if i < 0 {
				continue
			}
			m, ok, r := row.judge(ph(i), a.sched.phases[i], i)
			if !r {
				continue
			}
			ran = true
			parts = append(parts, m)
			if !ok {
				met = 0
			}
		}
		if !ran {
			out = append(out, notRun(row.target, "the static limits or the phases were not run"))
			continue
		}
		out = append(out, verdict{row.target, strings.Join(parts, "; ") + busy(a, ro.over3, ro.over10), met})
	}

	t = fmt.Sprintf("steady 3×: the limit's coefficient of variation over %d s < %.0f%%", steadyLength, cvMax*100)
	if ro.steady < 0 {
		out = append(out, notRun(t, "no steady phase (-steady 0)"))
	} else {
		s := ph(ro.steady)
		m := fmt.Sprintf("%.1f%% (mean %.1f, %d readings over %.0f s)", s.limitCV*100, s.limit, countPolls(a, ro.steady), s.secs)
		worst := s.limitCV
		if len(s.instCV) > 1 {
			var each []string
			worst = 0
			for _, cv := range s.instCV {
				each = append(each, fmt.Sprintf("%.1f%%", cv*100))
				worst = math.Max(worst, cv)
			}
			m = fmt.Sprintf("each instance's %s (their sum's %.1f%%, mean %.1f; %d readings over %.0f s)", strings.Join(each, ", "), s.limitCV*100, s.limit, countPolls(a, ro.steady), s.secs)
		}
		met := yes(worst < cvMax)
		if s.secs < steadyLength {
			m += fmt.Sprintf(", shorter than %d s", steadyLength)
		}
		out = append(out, verdict{t, m + busy(a, ro.steady), met})
	}
	return out
}

// busy notes how late the drill's sender was in the adaptive run's
// phases, when more than busyLag ms: then the machine was measured too.
func busy(a *runResult, phases ...int) string {
	var lag time.Duration
	for _, i := range phases {
		if i >= 0 {
			lag = max(lag, a.phase[i].lag)
		}
	}
	if lag <= busyLag*time.Millisecond {
		return ""
	}
	return fmt.Sprintf(" [busy machine: the drill sent up to %.0f ms late]", ms(lag))
}

func recoveryVerdict(target string, k int, ok bool, within int, p phaseSpec, bar, series string) verdict {
	if !ok {
		return verdict{target, fmt.Sprintf("not within the phase's %v (%s; per second: %s)", p.dur, bar, series), 0}
	}
	return verdict{target, fmt.Sprintf("after %d s (%s, %d s in a row; per second: %s)", k, bar, holdSeconds, series), yes(k <= within)}
}

// perSecond is f of each bucket, formatted, space-separated.
func perSecond(bs []*bucket, f func(stats) float64, format string) string {
	var parts []string
	for i := range bs {
		v := f(statsOf(bs[i : i+1]))
		if math.IsNaN(v) {
			parts = append(parts, "–")
			continue
		}
		parts = append(parts, fmt.Sprintf(format, v))
	}
	return strings.Join(parts, " ")
}

func countPolls(r *runResult, i int) int {
	n := 0
	for _, b := range r.buckets[i] {
		n += len(b.limit)
	}
	return n
}

func printTargets(w io.Writer, vs []verdict) {
	fmt.Fprintln(w, "| target | measured (adaptive) | met? |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, v := range vs {
		fmt.Fprintf(w, "| %s | %s | %s |\n", v.target, v.measured, v.metString())
	}
}
