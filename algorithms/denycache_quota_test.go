package algorithms

import (
	"context"
	"testing"
	"time"
)

// TestDenyCacheQuotaLeasesOut: a denial of a key with units out in quota
// leases is cached until their latest end at most (they may come back
// unused), a ban for as long as it lasts, and requests differing only in
// their lease ask are the same request: the denial of a request the lease
// holder sent (with its ask and its name, or as not leasing) answers the
// handler's (without).
func TestDenyCacheQuotaLeasesOut(t *testing.T) {
	c := NewDenyCache(NewMemoryStore())
	now := time.Unix(1000, 0)
	at := now.UnixMicro()
	limit := Limit{Algorithm: FixedWindow, Events: 1, Window: time.Hour}
	req := []Request{{Key: "k", Limit: limit, Cost: 1, Quota: QuotaAsk{For: time.Second}}}
	sent := []Request{req[0]}
	sent[0].Quota.Units, sent[0].Quota.Min, sent[0].Quota.Holder = 5, time.Millisecond, "instance-1"
	out := QuotaGrant{End: at + 200_000, Out: 4}
	c.RememberAt(now, sent, []Decision{{RetryAfter: time.Minute, At: at, Quota: out}})
	if ds := c.CachedAt(now.Add(199*time.Millisecond), req); ds == nil {
		t.Error("not cached before the leases' end (or the ask made it another request)")
	}
	if ds := c.CachedAt(now.Add(200*time.Millisecond), req); ds != nil {
		t.Errorf("cached at the leases' end: %+v, want asked again", ds)
	}
	untracked := []Request{req[0]} // a key the holder does not track goes as not leasing
	untracked[0].Key, untracked[0].Quota = "u", QuotaAsk{}
	c.RememberAt(now, untracked, []Decision{{RetryAfter: time.Minute, At: at}})
	if ds := c.CachedAt(now.Add(time.Second), []Request{{Key: "u", Limit: limit, Cost: 1, Quota: QuotaAsk{For: time.Second}}}); ds == nil {
		t.Error("the denial of a request sent as not leasing does not answer the handler's")
	}
	banned := []Request{{Key: "b", Limit: limit, Cost: 1, BanSeconds: 60, Quota: QuotaAsk{For: time.Second}}}
	c.RememberAt(now, banned, []Decision{{RetryAfter: time.Minute, At: at, Banned: true, Quota: out}})
	if ds := c.CachedAt(now.Add(time.Second), banned); ds == nil {
		t.Error("a ban not cached past the leases' end")
	}
}

// TestDenyCacheUncached: Uncached asks the next store whatever is cached
// (its caller looked the denial up first), and still caches a denial.
func TestDenyCacheUncached(t *testing.T) {
	c := NewDenyCache(NewMemoryStore())
	req := []Request{{Key: "k", Limit: Limit{Algorithm: FixedWindow, Events: 1, Window: time.Hour}, Cost: 1}}
	c.RememberAt(time.Now(), req, []Decision{{RetryAfter: time.Hour}})
	if ds, _ := c.Allow(context.Background(), req); ds[0].Allowed || !ds[0].Cached {
		t.Fatalf("Allow: %+v, want the cached denial", ds)
	}
	if ds, _ := c.Uncached().Allow(context.Background(), req); !ds[0].Allowed || ds[0].Cached {
		t.Errorf("Uncached().Allow: %+v, want the store's admission", ds)
	}
	c.ForgetAll()
	if ds, _ := c.Uncached().Allow(context.Background(), req); ds[0].Allowed {
		t.Fatalf("second request: %+v, want denied by the store", ds)
	}
	if ds := c.Cached(req); ds == nil {
		t.Error("a denial through Uncached was not cached")
	}
}
