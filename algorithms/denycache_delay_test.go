package algorithms

import (
	"fmt"
	"testing"
	"time"
)

// TestDenyCacheMaxDelay: a denial cached for a request with one max_delay
// answers the same request with another (a request that took no place
// among the waiting drops its max_delay) exactly as the store would: a
// token bucket's request is admitted with a reservation when its turn
// comes within its max_delay, so a cached denial answers only while that
// turn is further, with the retry the store would give. The store here
// (1/s, burst 1) holds two reservations: a request's turn is 3s away.
func TestDenyCacheMaxDelay(t *testing.T) {
	start := time.Unix(1000, 0)
	limit := Limit{Algorithm: TokenBucket, Events: 1, Window: time.Second, Burst: 1, MaxDelay: 2 * time.Second}
	request := func(maxDelay time.Duration) []Request {
		l := limit
		l.MaxDelay = maxDelay
		return []Request{{Key: "k", Limit: l, Cost: 1}}
	}
	filled := func(t *testing.T) *MemoryStore {
		t.Helper()
		s := NewMemoryStore()
		for i := range 3 { // at once, then two reservations (1s and 2s)
			if ds := s.AllowAt(start, request(limit.MaxDelay)); !ds[0].Allowed {
				t.Fatalf("filling request %d: denied, want admitted", i)
			}
		}
		return s
	}
	tests := []struct {
		cachedFor, askedFor time.Duration // max_delay of the cached denial, and of the request
		elapsed             time.Duration
		wantRetry           time.Duration // 0: no cached answer (the store is asked)
	}{
		{2 * time.Second, 2 * time.Second, 0, time.Second},
		{2 * time.Second, 0, 0, 3 * time.Second}, // no place: waits for its whole turn
		{2 * time.Second, 0, time.Second / 2, 2500 * time.Millisecond},
		{0, 2 * time.Second, 0, time.Second},               // a place: its turn less max_delay
		{0, 2 * time.Second, time.Second, 0},               // its turn within max_delay: a reservation
		{0, 3 * time.Second, 0, 0},                         // its turn within max_delay
		{2 * time.Second, 2 * time.Second, time.Second, 0}, // the cached retry passed
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("cached for %v, asked for %v after %v", tt.cachedFor, tt.askedFor, tt.elapsed), func(t *testing.T) {
			cache := NewDenyCacheOf(NewMemoryStore(), 16)
			ds := filled(t).AllowAt(start, request(tt.cachedFor))
			if ds[0].Allowed {
				t.Fatalf("cached request: admitted, want denied")
			}
			cache.RememberAt(start, request(tt.cachedFor), ds)
			at := start.Add(tt.elapsed)
			got := cache.CachedAt(at, request(tt.askedFor))
			store := filled(t).AllowAt(at, request(tt.askedFor)) // what the store answers then
			if tt.wantRetry == 0 {
				if got != nil {
					t.Errorf("cache: got %+v, want no answer (the store admits: %+v)", got[0], store[0])
				}
				return
			}
			if got == nil || got[0].Allowed || got[0].RetryAfter != tt.wantRetry {
				t.Fatalf("cache: got %+v, want denied with retry %v", got, tt.wantRetry)
			}
			if store[0].Allowed || store[0].RetryAfter != got[0].RetryAfter {
				t.Errorf("store: got %+v, want the cache's denial, retry %v", store[0], got[0].RetryAfter)
			}
		})
	}
}

// TestDenyCacheAppliedMaxDelay: a cached denial shifts a zone's retry
// only by the max_delay the store applies to it, so that it answers as
// the store would: none for a dry-run zone (it never waits) and none for
// a cost above the capacity (its retry is the window whatever its
// max_delay).
func TestDenyCacheAppliedMaxDelay(t *testing.T) {
	start := time.Unix(1000, 0)
	fixed := Limit{Algorithm: FixedWindow, Events: 1, Window: time.Hour}
	bucket := Limit{Algorithm: TokenBucket, Events: 1, Window: time.Second, Burst: 1}
	tests := []struct {
		name string
		reqs func(maxDelay time.Duration) []Request
	}{
		{"dry-run zone", func(maxDelay time.Duration) []Request {
			l := bucket
			l.MaxDelay = maxDelay
			return []Request{{Key: "site", Limit: fixed, Cost: 1}, {Key: "shadow", Limit: l, Cost: 1, DryRun: true}}
		}},
		{"cost above capacity, ban zone", func(maxDelay time.Duration) []Request {
			l := bucket
			l.MaxDelay = maxDelay
			return []Request{{Key: "banning", Limit: l, Cost: 2, BanSeconds: 60}}
		}},
	}
	for _, tt := range tests {
		for _, c := range []struct{ cachedFor, askedFor time.Duration }{{0, 2 * time.Second}, {2 * time.Second, 0}} {
			t.Run(fmt.Sprintf("%s, cached for %v, asked for %v", tt.name, c.cachedFor, c.askedFor), func(t *testing.T) {
				store := NewMemoryStore()
				store.AllowAt(start, tt.reqs(c.cachedFor)) // the fixed window's one event, if any
				ds := store.AllowAt(start, tt.reqs(c.cachedFor))
				if Admitted(tt.reqs(c.cachedFor), ds) {
					t.Fatalf("cached request: admitted, want denied")
				}
				cache := NewDenyCacheOf(NewMemoryStore(), 16)
				cache.RememberAt(start, tt.reqs(c.cachedFor), ds)
				got := cache.CachedAt(start, tt.reqs(c.askedFor))
				want := store.AllowAt(start, tt.reqs(c.askedFor))
				if got == nil {
					t.Fatalf("cache: no answer, want the store's denial %+v", want)
				}
				for i := range want {
					if got[i].RetryAfter != want[i].RetryAfter {
						t.Errorf("cached retry of zone %d: got %v, want the store's %v", i, got[i].RetryAfter, want[i].RetryAfter)
					}
				}
			})
		}
	}
}
