package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
	"github.com/sluicehq/caddy-sluice/redisstore"
)

// TestTopFlushAndMerge: two instances, each with its sketch, drain it into
// one Redis over several minutes; TopSets.Read sums the last TopMinutes+1
// minutes of both, and a minute older than that no longer counts. The
// sets expire after TopTTL.
func TestTopFlushAndMerge(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const prefix, zone = "sluice:", "api"
	// minutes are chosen, not waited for; each set expires TopTTL after
	// its minute began, so even the oldest written here is still there
	now := time.Now()

	a, b := algorithms.NewTopKeys(0), algorithms.NewTopKeys(0)
	flush := func(s *algorithms.TopKeys, at time.Time) {
		t.Helper()
		if err := (redisstore.TopSets{Client: rdb, Prefix: prefix, Zone: zone}).Add(ctx, at, s.Drain()); err != nil {
			t.Fatal(err)
		}
	}
	// too old: 6 minutes before now's minute
	a.Add("ancient", 1000)
	flush(a, now.Add(-6*time.Minute))
	// instance a: noisy 30 four minutes ago, 20 now; instance b: noisy 25
	// and other 40 now
	a.Add("noisy", 30)
	flush(a, now.Add(-4*time.Minute))
	a.Add("noisy", 20)
	a.Add("other", 1)
	flush(a, now)
	b.Add("noisy", 25)
	b.Add("other", 40)
	flush(b, now)
	flush(b, now) // an empty drain writes nothing

	got, err := (redisstore.TopSets{Client: rdb, Prefix: prefix, Zone: zone}).Read(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	want := []algorithms.Counted{{Key: "noisy", Count: 75}, {Key: "other", Count: 41}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("TopSets.Read: got %+v, want %+v", got, want)
	}
	if key := redisstore.TopKey(prefix, zone, time.Unix(1_800_000_000, 0)); key != "sluice:top:{api:30000000}" {
		t.Errorf("TopKey: %q, want one hash tag of the zone and the minute", key)
	}
	// a minute's set outlives the span TopSets.Read reads, and no more
	for _, m := range []time.Duration{-6 * time.Minute, 0} {
		ttl, err := rdb.PTTL(ctx, redisstore.TopKey(prefix, zone, now.Add(m))).Result()
		if err != nil || ttl <= 0 || ttl > redisstore.TopTTL {
			t.Errorf("TTL of the set of %v: %v (%v), want in (0, %v]", m, ttl, err, redisstore.TopTTL)
		}
	}
}

// TestTopExpires: a set written now lives TopTTL from its minute's start.
func TestTopExpires(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	now := time.Now()
	if err := (redisstore.TopSets{Client: rdb, Prefix: "p:", Zone: "z"}).Add(ctx, now, []algorithms.Counted{{Key: "k", Count: 3}}); err != nil {
		t.Fatal(err)
	}
	ttl, err := rdb.PTTL(ctx, redisstore.TopKey("p:", "z", now)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= redisstore.TopTTL-time.Minute-time.Second || ttl > redisstore.TopTTL {
		t.Errorf("TTL: %v, want between %v and %v", ttl, redisstore.TopTTL-time.Minute, redisstore.TopTTL)
	}
	got, err := (redisstore.TopSets{Client: rdb, Prefix: "p:", Zone: "z"}).Read(ctx, now)
	if err != nil || len(got) != 1 || got[0] != (algorithms.Counted{Key: "k", Count: 3}) {
		t.Errorf("TopSets.Read: %+v, %v", got, err)
	}
}

// TestTopCluster: on a Redis Cluster, a flush writes one slot and TopSets.Read
// reads the minutes' sets across the cluster's nodes.
func TestTopCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	rdb := cluster.Client(t)
	ctx := context.Background()
	now := time.Now()
	for m := range 6 {
		entries := []algorithms.Counted{{Key: "noisy", Count: 10}, {Key: "quiet", Count: uint64(m)}}
		if err := (redisstore.TopSets{Client: rdb, Prefix: "sluice:", Zone: "api"}).Add(ctx, now.Add(-time.Duration(m)*time.Minute), entries); err != nil {
			t.Fatal(err)
		}
	}
	got, err := (redisstore.TopSets{Client: rdb, Prefix: "sluice:", Zone: "api"}).Read(ctx, now)
	want := []algorithms.Counted{{Key: "noisy", Count: 60}, {Key: "quiet", Count: 15}}
	if err != nil || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("TopSets.Read: %+v (%v), want %+v", got, err, want)
	}
}
