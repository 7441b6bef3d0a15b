package algorithms

import (
	"fmt"
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
