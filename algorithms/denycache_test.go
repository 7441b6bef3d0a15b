package algorithms

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// TestDenyCacheShards: a large deny cache spreads its denials over shards,
// finds every one of them again, stays within its size, and Forget reaches
// every shard.
func TestDenyCacheShards(t *testing.T) {
	const size = 64 * denyShardMin
	c := NewDenyCacheOf(NewMemoryStore(), size)
	if got, want := len(c.shards), maxDenyShards; got != want {
		t.Fatalf("shards = %d, want %d", got, want)
	}
	now := time.Unix(1000, 0)
	limit := Limit{Algorithm: FixedWindow, Events: 1, Window: time.Hour}
	reqs := func(i int) []Request {
		return []Request{{Key: fmt.Sprint("a", i), Limit: limit, Cost: 1}, {Key: fmt.Sprint("b", i), Limit: limit, Cost: 1}}
	}
	deny := []Decision{{RetryAfter: time.Minute}, {Allowed: true}}
	const n = 2 * size
	for i := range n {
		c.RememberAt(now, reqs(i), deny)
	}
	if got := c.Len(); got > size || got < size/2 {
		t.Errorf("cached %d of %d denials, want between %d and %d", got, n, size/2, size)
	}
	used := 0
	for i := range c.shards {
		if len(c.shards[i].denials) > 0 {
			used++
		}
	}
	if used != len(c.shards) {
		t.Errorf("%d of %d shards hold denials, want all", used, len(c.shards))
	}
	last := reqs(n - 1)
	if ds := c.CachedAt(now.Add(time.Second), last); ds == nil || ds[0].RetryAfter != time.Minute-time.Second || !ds[0].Cached {
		t.Errorf("latest denial: got %+v, want cached with 59s to retry", ds)
	}
	if ds := c.CachedAt(now.Add(time.Minute), last); ds != nil {
		t.Errorf("at its retry time: got %+v, want no denial", ds)
	}
	c.Forget(reqs(n - 2)[1].Key)
	if ds := c.CachedAt(now, reqs(n-2)); ds != nil {
		t.Errorf("forgotten: got %+v, want no denial", ds)
	}
}

// denyingStore denies every request with a fixed retry time, and records
// when its last reply left.
type denyingStore struct {
	Store   // the rest of the contract, which these tests never call
	retry   time.Duration
	latency time.Duration // the round trip it stands for
	replied time.Time
}

func (s *denyingStore) Allow(_ context.Context, reqs []Request) ([]Decision, error) {
	time.Sleep(s.latency)
	ds := make([]Decision, len(reqs))
	for i := range ds {
		ds[i] = Decision{RetryAfter: s.retry, ResetAfter: s.retry}
	}
	s.replied = time.Now()
	return ds, nil
}

var boundLimit = Limit{Algorithm: FixedWindow, Events: 1, Window: time.Hour}

func keyReq(i int) []Request {
	return []Request{{Key: "k" + strconv.Itoa(i), Limit: boundLimit, Cost: 1}}
}

func denied(retry time.Duration) []Decision {
	return []Decision{{RetryAfter: retry, ResetAfter: retry}}
}

// TestDenyCacheStaysBounded: a full cache keeps caching new denials, the
// oldest giving way, expired or not, and never holds more than its size.
func TestDenyCacheStaysBounded(t *testing.T) {
	const size = 4
	now := time.Unix(1000, 0)
	tests := []struct {
		name       string
		retry      time.Duration // of the first size denials
		putAt      time.Time     // of the next one
		wantCached []int         // keys cached afterwards, of 0..size
		wantGone   []int
	}{
		{"full of unexpired denials: the oldest gives way", time.Hour, now, []int{1, 2, 3, size}, []int{0}},
		{"full of expired denials: they are swept a few at a time", time.Second, now.Add(time.Minute), []int{size}, []int{0, 1, 2, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cache := NewDenyCacheOf(&denyingStore{}, size)
			for i := range size {
				cache.RememberAt(now, keyReq(i), denied(tt.retry))
			}
			cache.RememberAt(tt.putAt, keyReq(size), denied(time.Hour))
			if got := cache.Len(); got > size {
				t.Errorf("denials cached: got %d, want at most %d", got, size)
			}
			for _, i := range tt.wantCached {
				if cache.CachedAt(tt.putAt, keyReq(i)) == nil {
					t.Errorf("key %d: got no cached denial, want one", i)
				}
			}
			for _, i := range tt.wantGone {
				if ds := cache.CachedAt(tt.putAt, keyReq(i)); ds != nil {
					t.Errorf("key %d: got cached %+v, want none", i, ds)
				}
			}
		})
	}
}

// TestDenyCacheDatesDenialAtReply: a denial is dated when its reply
// arrives, so its cached retry time does not run early by the round trip.
func TestDenyCacheDatesDenialAtReply(t *testing.T) {
	store := &denyingStore{retry: time.Second, latency: time.Millisecond}
	cache := NewDenyCache(store)
	if _, err := cache.Allow(context.Background(), keyReq(0)); err != nil {
		t.Fatal(err)
	}
	ds := cache.CachedAt(store.replied, keyReq(0))
	if ds == nil {
		t.Fatal("the denial was not cached")
	}
	if got, want := ds[0].RetryAfter, store.retry; got < want {
		t.Errorf("cached retry at the reply's time: got %v, want %v (dated before the round trip)", got, want)
	}
}

// BenchmarkDenyCacheFull: a new denial and a lookup while the cache is
// full of unexpired denials (an attacker with fresh keys): constant work,
// whatever the size.
func BenchmarkDenyCacheFull(b *testing.B) {
	now := time.Unix(1000, 0)
	cache := NewDenyCache(&denyingStore{})
	reqs := make([][]Request, DefaultDenials)
	for i := range reqs {
		reqs[i] = keyReq(i)
		cache.RememberAt(now, reqs[i], denied(time.Hour))
	}
	ds := denied(time.Hour)
	b.ResetTimer()
	i := 0
	for b.Loop() {
		r := reqs[i%len(reqs)] // evicted by now: a fresh key to the cache
		cache.RememberAt(now, r, ds)
		cache.CachedAt(now, r)
		i++
	}
}

// TestDenyCacheLimitPerRequest: a denial cached under a lower limit does
// not deny a request for the same key carrying a higher one (limits per
// request: a customer upgraded); the lower limit's denial still holds.
func TestDenyCacheLimitPerRequest(t *testing.T) {
	c := NewDenyCache(NewMemoryStore())
	ctx := context.Background()
	free := Limit{Algorithm: FixedWindow, Events: 1, Window: time.Hour}
	pro := Limit{Algorithm: FixedWindow, Events: 3, Window: time.Hour}
	req := func(l Limit) []Request { return []Request{{Key: "denycache-upgrade", Limit: l, Cost: 1}} }
	for i, step := range []struct {
		limit         Limit
		allowed       bool
		cached        bool
		wantRemaining int64
	}{
		{free, true, false, 0},
		{free, false, false, 0},
		{free, false, true, 0}, // from the cache
		{pro, true, false, 1},  // not the cached denial: the store admits
		{pro, true, false, 0},
		{pro, false, false, 0},
		{free, false, false, 0}, // pro's denial took the key's place in the cache
	} {
		ds, err := c.Allow(ctx, req(step.limit))
		if err != nil {
			t.Fatal(err)
		}
		if d := ds[0]; d.Allowed != step.allowed || d.Cached != step.cached || max(0, d.Remaining) != step.wantRemaining {
			t.Errorf("step %d (%v): %+v, want allowed %v cached %v remaining %d", i, step.limit, d, step.allowed, step.cached, step.wantRemaining)
		}
	}
}
