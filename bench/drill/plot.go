package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// plotHeight is the rows of each chart (8 levels a row).
const plotHeight = 4

var blocks = []rune(" ▁▂▃▄▅▆▇█")

// plot draws r's per-second series (limit, in flight, admitted p99,
// shed rate and goodput) as text charts, one column a second, the
// phases marked under them.
func plot(w io.Writer, r *runResult, capacity, p99Bar float64) {
	var limit, inFlight, p99, shed, goodput []float64
	for _, bs := range r.buckets {
		for i := range bs {
			s := statsOf(bs[i : i+1])
			limit = append(limit, s.limit)
			inFlight = append(inFlight, s.inFlight)
			p99 = append(p99, s.p99)
			shed = append(shed, s.shedPct+s.toutPct)
			goodput = append(goodput, s.goodput)
		}
	}
	top := math.Max(maxOf(limit), maxOf(inFlight))
	chart(w, "limit", limit, top, "%.0f")
	chart(w, "in flight", inFlight, top, "%.0f")
	note := ""
	if !math.IsNaN(p99Bar) {
		note = fmt.Sprintf(" (%.0f× unloaded: %.0f ms)", p99Factor, p99Bar)
	}
	chart(w, "p99 ms"+note, p99, math.Max(maxOf(p99), p99Bar), "%.0f")
	chart(w, "not served %", shed, 100, "%.0f")
	chart(w, fmt.Sprintf("goodput/s (capacity %.0f)", capacity), goodput, math.Max(maxOf(goodput), capacity), "%.0f")
	axis(w, r)
}

func maxOf(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		if !math.IsNaN(x) {
			m = math.Max(m, x)
		}
	}
	return m
}

const gutter = 8 // the scale's width, left of the chart

func chart(w io.Writer, label string, xs []float64, top float64, format string) {
	fmt.Fprintf(w, "%s\n", label)
	if top <= 0 {
		top = 1
	}
	for row := plotHeight - 1; row >= 0; row-- {
		scale := ""
		switch row {
		case plotHeight - 1:
			scale = fmt.Sprintf(format, top)
		case 0:
			scale = "0"
		}
		var b strings.Builder
		for _, x := range xs {
			if math.IsNaN(x) {
				b.WriteRune(' ')
				continue
			}
			eighths := int(math.Round(x / top * plotHeight * 8))
			if x > 0 && eighths == 0 {
				eighths = 1
			}
			fill := min(max(eighths-row*8, 0), 8)
			b.WriteRune(blocks[fill])
		}
		fmt.Fprintf(w, "%*s ┤%s\n", gutter, scale, b.String())
	}
}

// axis marks each phase's first second under the charts, and names it.
func axis(w io.Writer, r *runResult) {
	var marks, names []rune
	for i, p := range r.sched.phases {
		n := len(r.buckets[i])
		for k := range n {
			if k == 0 {
				marks = append(marks, '┬')
			} else {
				marks = append(marks, '─')
			}
		}
		name := []rune(p.name)
		if len(name) > n-1 {
			name = name[:max(n-1, 0)]
		}
		names = append(names, name...)
		for range n - len(name) {
			names = append(names, ' ')
		}
	}
	fmt.Fprintf(w, "%*s └%s\n", gutter, "", string(marks))
	fmt.Fprintf(w, "%*s  %s\n", gutter, "", strings.TrimRight(string(names), " "))
	fmt.Fprintf(w, "%*s  one column a second, by when a request was due\n", gutter, "")
}
