package sluice

import (
	"testing"
	"time"
)

// TestConcurrencyZoneSetup: the default window, and the policy member
// without w.
func TestConcurrencyZoneSetup(t *testing.T) {
	z := &Zone{Key: "k", Algorithm: "concurrency", MaxEvents: 10}
	if err := z.setup("inflight"); err != nil {
		t.Fatal(err)
	}
	if err := z.validate(); err != nil {
		t.Fatal(err)
	}
	if got, want := z.limit.Window, time.Minute; got != want {
		t.Errorf("got window %v, want %v", got, want)
	}
	if got, want := z.policy, `"inflight";q=10;qu="concurrent-requests"`; got != want {
		t.Errorf("got policy %s, want %s", got, want)
	}
}
