package algorithms

import (
	"errors"
	"testing"
	"time"
)

func TestBreaker(t *testing.T) {
	var b Breaker
	now := time.Unix(1000, 0)
	fail := errors.New("down")
	for i := range breakerThreshold {
		if !b.Allow(now) {
			t.Fatalf("call %d refused before the threshold", i)
		}
		b.Record(now, fail)
	}
	if b.Allow(now) || !b.IsOpen() {
		t.Fatal("breaker still lets calls through after the threshold")
	}
	later := now.Add(breakerCooldown * 2)
	if !b.Allow(later) {
		t.Fatal("no probe after the cool-down")
	}
	if b.Allow(later) {
		t.Fatal("a second probe while the first is in flight")
	}
	b.Record(later, fail)
	if b.Allow(later) {
		t.Fatal("a failed probe did not reopen the breaker")
	}
	evenLater := later.Add(breakerCooldown * 2)
	if !b.Allow(evenLater) {
		t.Fatal("no probe after the second cool-down")
	}
	if recovered := b.Record(evenLater, nil); !recovered {
		t.Error("a successful probe did not report recovery")
	}
	if !b.Allow(evenLater) || b.IsOpen() {
		t.Error("breaker not closed after a successful probe")
	}
}
