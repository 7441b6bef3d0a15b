package adaptive

import (
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func TestBaseline(t *testing.T) {
	ms := time.Millisecond
	type feed struct {
		after  time.Duration // since the previous feed
		median time.Duration
	}
	tests := []struct {
		name  string
		feeds []feed
		want  time.Duration
	}{
		{"first median sets it", []feed{{0, 30 * ms}}, 30 * ms},
		{"falls at once", []feed{{0, 30 * ms}, {time.Second, 10 * ms}}, 10 * ms},
		{"a higher median does not lift the low percentile", []feed{{0, 100 * ms}, {time.Minute, 200 * ms}}, 100 * ms},
		{"never above its target", []feed{{0, 100 * ms}, {10 * time.Minute, 105 * ms}}, 100 * ms},
		{"the low percentile, not the last", []feed{{0, 10 * ms}, {time.Minute, 50 * ms}, {time.Minute, 50 * ms}}, 10 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b baseline
			now := t0
			for _, f := range tt.feeds {
				now = now.Add(f.after)
				b.addAt(now, f.median)
			}
			if b.value != tt.want {
				t.Errorf("baseline = %v, want %v", b.value, tt.want)
			}
		})
	}
}

func TestBaselineLearnsSlowerReleaseWithinMinutes(t *testing.T) {
	var b baseline
	now := t0
	b.addAt(now, 100*time.Millisecond)
	// the release is now 150ms: once the window holds only 150ms medians,
	// the baseline climbs 10% a minute
	for range 10 * 60 { // ten minutes of 1s intervals
		now = now.Add(time.Second)
		b.addAt(now, 150*time.Millisecond)
	}
	if b.value != 150*time.Millisecond {
		t.Errorf("baseline after ten minutes at 150ms = %v, want 150ms", b.value)
	}
}

func TestBaselineRisesAtMostTenPercentAMinute(t *testing.T) {
	var b baseline
	now := t0
	b.addAt(now, 100*time.Millisecond)
	for range baselineWindow { // the window fills with 300ms medians
		now = now.Add(2 * time.Second)
		b.addAt(now, 300*time.Millisecond)
	}
	before := b.value
	for range 30 { // one more minute of them
		now = now.Add(2 * time.Second)
		b.addAt(now, 300*time.Millisecond)
	}
	if ratio := float64(b.value) / float64(before); ratio <= 1 || ratio > 1.11 {
		t.Errorf("baseline went from %v to %v in a minute below its target (×%.3f), want a rise of at most 10%% (compounded)", before, b.value, ratio)
	}
}

func TestBaselineSeed(t *testing.T) {
	var b baseline
	b.seed(t0, 80*time.Millisecond)
	b.seed(t0, 200*time.Millisecond)
	if b.value != 80*time.Millisecond {
		t.Fatalf("seeded = %v, want the first, 80ms", b.value)
	}
	b.addAt(t0.Add(time.Second), 20*time.Millisecond)
	if b.value != 20*time.Millisecond {
		t.Errorf("after a calm interval = %v, want 20ms: falls at once", b.value)
	}
}

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		in   []time.Duration
		want time.Duration
	}{{nil, 0}, {[]time.Duration{3}, 3}, {[]time.Duration{5, 1, 3}, 3}, {[]time.Duration{4, 1, 3, 2}, 2}} {
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
