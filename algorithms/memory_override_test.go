package algorithms

import (
	"testing"
	"time"
)

// TestMemoryOverridesBounded: the memory store holds at most one override
// per key it may hold; an expired one makes room.
func TestMemoryOverridesBounded(t *testing.T) {
	m := NewMemoryStoreOf(2)
	now := time.Unix(1000, 0)
	if err := m.SetOverrideAt(now, "a", Override{Events: 1}, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := m.SetOverrideAt(now, "b", Override{Events: 1}, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.SetOverrideAt(now, "c", Override{Events: 1}, 0); err != ErrTooManyOverrides {
		t.Fatalf("a third override: %v, want ErrTooManyOverrides", err)
	}
	if err := m.SetOverrideAt(now, "b", Override{Events: 2}, 0); err != nil {
		t.Fatalf("replacing one: %v", err)
	}
	if err := m.SetOverrideAt(now.Add(time.Second), "c", Override{Events: 1}, 0); err != nil {
		t.Fatalf("after a's expiry: %v", err)
	}
}
