package integration_test

import (
	"slices"
	"sort"
	"testing"
)

// Checks of admissions against an algorithm's definition, from the
// client's side. The instant Caddy admitted a request (on a Redis call or
// from a quota lease) lies between the moment the client sent it and the
// moment the answer came back, and Redis, Caddy and the test read one
// system clock (Redis TIME, time.Now: CLOCK_REALTIME on one machine). So a
// request counts in a window or interval only when its whole [sent, recv]
// lies inside it: each request's margin is its own round trip, no
// constant is guessed. Every count below is then a lower bound of the
// true count, and a count over the definition's bound is an admission the
// definition does not allow. The price: an over-admission made of requests
// straddling a window's edge can go unseen.

// admission is one admitted request as the client saw it: sent and recv
// in µs of the wall clock (the epoch Redis TIME counts from).
type admission struct {
	sent, recv int64
}

// worstFixedWindow is the epoch-aligned window of length window (µs) that
// holds the most admissions wholly inside it: its start and that count.
func worstFixedWindow(adm []admission, window int64) (start int64, count int) {
	counts := map[int64]int{}
	for _, a := range adm {
		if w := a.sent / window; w == a.recv/window {
			counts[w]++
		}
	}
	for w, n := range counts {
		if n > count || (n == count && w*window < start) {
			start, count = w*window, n
		}
	}
	return start, count
}

// worstTrailingWindow is the trailing window (end−window, end] (µs) that
// holds the most admissions wholly inside it: its end and that count. A
// window holding the most ends at some admission's recv, so those are the
// only ends tried.
func worstTrailingWindow(adm []admission, window int64) (end int64, count int) {
	byRecv := slices.Clone(adm)
	sort.Slice(byRecv, func(i, j int) bool { return byRecv[i].recv < byRecv[j].recv })
	lo := 0
	for j := range byRecv {
		if j+1 < len(byRecv) && byRecv[j+1].recv == byRecv[j].recv {
			continue // the last of equal ends counts them all
		}
		t := byRecv[j].recv
		for byRecv[lo].recv <= t-window {
			lo++ // sent ≤ recv ≤ t−window: outside every later window too
		}
		n := 0
		for _, a := range byRecv[lo : j+1] {
			if a.sent > t-window {
				n++
			}
		}
		if n > count {
			end, count = t, n
		}
	}
	return end, count
}

// bucketExcess finds the interval [from, to] (µs) whose admissions wholly
// inside it most exceed a token bucket's bound, burst + events/window ×
// (to − from): the interval, its count and the bound, in units of
// 1/window (count × window against burst × window + events × length, so
// that no rounding can hide an excess). excess ≤ 0 means none exceeds.
// Intervals that matter start at some sent and end at some recv; for
// each start the ends are walked in order, so the count at the m-th end
// is at least m.
func bucketExcess(adm []admission, burst, events, window int64) (from, to int64, count int, excess int64) {
	bySent := slices.Clone(adm)
	sort.Slice(bySent, func(i, j int) bool { return bySent[i].sent < bySent[j].sent })
	excess = -1 << 62
	var ends []int64 // recv of the admissions sent at or after the start, sorted
	for i := len(bySent) - 1; i >= 0; i-- {
		r := bySent[i].recv
		at, _ := slices.BinarySearch(ends, r)
		ends = slices.Insert(ends, at, r)
		if i > 0 && bySent[i-1].sent == bySent[i].sent {
			continue // the first of equal starts counts them all
		}
		a := bySent[i].sent
		for m, b := range ends {
			if e := int64(m+1)*window - (burst*window + events*(b-a)); e > excess {
				from, to, count, excess = a, b, m+1, e
			}
		}
	}
	return from, to, count, excess
}

// TestAdmissionChecks: the checks above see an over-admission made of
// requests wholly inside a window, and let through one that only a
// request straddling the window's edge would make.
func TestAdmissionChecks(t *testing.T) {
	const s = int64(1_000_000) // one second in µs
	at := func(sent, recv int64) admission { return admission{sent, recv} }

	// fixed windows of 1 s, at most 2 each
	adm := []admission{at(10*s+1, 10*s+5), at(10*s+100, 10*s+200), at(11*s-10, 11*s+10), at(11*s+1, 11*s+2)}
	if start, n := worstFixedWindow(adm, s); n != 2 || start != 10*s {
		t.Errorf("fixed: worst window %d with %d, want %d with 2 (the straddling one not counted)", start, n, 10*s)
	}
	adm = append(adm, at(10*s+300, 10*s+400))
	if start, n := worstFixedWindow(adm, s); n != 3 || start != 10*s {
		t.Errorf("fixed: worst window %d with %d, want %d with 3", start, n, 10*s)
	}

	// trailing windows of 1 s: (t−1s, t]
	adm = []admission{at(0, 10), at(s/2, s/2+10), at(s+5, s+20), at(2*s+100, 2*s+200)}
	if end, n := worstTrailingWindow(adm, s); n != 2 {
		t.Errorf("trailing: worst window ending %d with %d, want 2", end, n)
	}
	adm = append(adm, at(s/2+50, s+6)) // (20, s+20] holds s/2, this one and s+5
	if end, n := worstTrailingWindow(adm, s); n != 3 || end != s+20 {
		t.Errorf("trailing: worst window ending %d with %d, want %d with 3", end, n, s+20)
	}
	adm = []admission{at(0, 10), at(s, s+1)} // (1, s+1] does not hold the one sent at 0
	if end, n := worstTrailingWindow(adm, s); n != 1 {
		t.Errorf("trailing: worst window ending %d with %d, want 1", end, n)
	}

	// token bucket: burst 2, 1 per second
	adm = []admission{at(0, 1), at(2, 3), at(s, s+1), at(3*s, 3*s+1)} // [0, s+1]: 3 ≤ 2 + 1.000001
	if from, to, n, e := bucketExcess(adm, 2, 1, s); e > 0 {
		t.Errorf("bucket: an excess of %d over [%d, %d] (count %d) where none is", e, from, to, n)
	}
	adm = append(adm, at(s+5, s+6)) // [0, s+6]: 4 > 2 + 1.000006
	if from, to, n, e := bucketExcess(adm, 2, 1, s); e <= 0 || n != 4 || from != 0 || to != s+6 {
		t.Errorf("bucket: excess %d over [%d, %d] with %d, want > 0 over [0, %d] with 4", e, from, to, n, s+6)
	}
}
