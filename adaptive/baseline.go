package adaptive

import (
	"slices"
	"time"
)

// Baseline rules.
const (
	// baselineWindow is how many calm intervals' medians the baseline is
	// the low percentile of.
	baselineWindow = 30
	// baselinePercentile is that low percentile.
	baselinePercentile = 0.1
	// baselineRise is the most the baseline rises in a minute, as a
	// fraction of itself: a slower release is learned within minutes, and
	// no burst of slow intervals lifts it at once.
	baselineRise = 0.10
)

// baseline is the latency the upstream answers in when it is not loaded:
// a windowed low percentile of per-interval median latency, fed only from
// intervals where in flight stayed at most max(min, limit/2) (the limiter
// decides which: overload cannot ratchet it up). It falls at once and
// rises at most baselineRise a minute.
type baseline struct {
	medians []time.Duration // the last baselineWindow calm medians, oldest first
	value   time.Duration   // 0 until the first median
	at      time.Time       // when value last changed or was held
}

// addAt feeds the median latency of a calm interval that ended at now.
func (b *baseline) addAt(now time.Time, median time.Duration) {
	if median <= 0 {
		return
	}
	if len(b.medians) == baselineWindow {
		b.medians = slices.Delete(b.medians, 0, 1)
	}
	b.medians = append(b.medians, median)
	target := b.lowPercentile()
	switch {
	case b.value == 0 || target <= b.value:
		b.value = target
	default:
		elapsed := now.Sub(b.at)
		rise := time.Duration(float64(b.value) * baselineRise * elapsed.Minutes())
		b.value = min(target, b.value+rise)
	}
	b.at = now
}

// seed sets the baseline from the first interval's median when no calm
// interval has set it yet (a limiter that starts under load): a later
// calm interval lowers it at once.
func (b *baseline) seed(now time.Time, median time.Duration) {
	if b.value == 0 && median > 0 {
		b.value, b.at = median, now
	}
}

func (b *baseline) lowPercentile() time.Duration {
	sorted := slices.Clone(b.medians)
	slices.Sort(sorted)
	return sorted[int(float64(len(sorted)-1)*baselinePercentile)]
}

// median is the median of samples (sorted in place); 0 for none.
func median(samples []time.Duration) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	slices.Sort(samples)
	n := len(samples)
	if n%2 == 1 {
		return samples[n/2]
	}
	return (samples[n/2-1] + samples[n/2]) / 2
}
