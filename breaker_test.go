package sluice

import (
	"errors"
	"testing"
	"time"
)

func TestBreaker(t *testing.T) {
	var b breaker
	now := time.Unix(1000, 0)
	fail := errors.New("down")
	for i := range breakerThreshold {
		if !b.allow(now) {
			t.Fatalf("call %d refused before the threshold", i)
		}
		b.record(now, fail)
	}
	if b.allow(now) || !b.isOpen() {
		t.Fatal("breaker still lets calls through after the threshold")
	}
	later := now.Add(breakerCooldown * 2)
	if !b.allow(later) {
		t.Fatal("no probe after the cool-down")
	}
	if b.allow(later) {
		t.Fatal("a second probe while the first is in flight")
	}
	b.record(later, fail)
	if b.allow(later) {
		t.Fatal("a failed probe did not reopen the breaker")
	}
	evenLater := later.Add(breakerCooldown * 2)
	if !b.allow(evenLater) {
		t.Fatal("no probe after the second cool-down")
	}
	if recovered := b.record(evenLater, nil); !recovered {
		t.Error("a successful probe did not report recovery")
	}
	if !b.allow(evenLater) || b.isOpen() {
		t.Error("breaker not closed after a successful probe")
	}
}
