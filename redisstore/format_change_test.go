package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestOverridesAndBansOutliveFormats: a key's override and ban are named
// after its key without the state format (so the next format finds them),
// and those an earlier release wrote after the state key, format
// included, still apply: on every algorithm, through Functions and
// scripts. Reset and ClearOverride delete both names, SetOverride the old
// one; every key the decide code writes expires.
func TestOverridesAndBansOutliveFormats(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	algs := append(append([]algorithms.Algorithm{}, allAlgorithms...), algorithms.Concurrency)
	for _, alg := range algs {
		for _, scripts := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/scripts=%v", alg, scripts), func(t *testing.T) {
				s := New(client, Options{Scripts: scripts})
				base := fmt.Sprintf("sluice:fmt:{%d}", rand.Int64())
				key := base + algorithms.StateSuffix(alg)
				limit := algorithms.Limit{Algorithm: alg, Events: 2, Window: time.Hour}
				req := func(slot string) algorithms.Decision {
					t.Helper()
					r := algorithms.Request{Key: key, Limit: limit, Cost: 1, Overrides: true, BanSeconds: 3600}
					if alg == algorithms.Concurrency {
						r.Slot = slot
					}
					ds, err := s.AllowAt(ctx, t0, []algorithms.Request{r})
					if err != nil {
						t.Fatal(err)
					}
					return ds[0]
				}
				if got, want := OverrideKey(key), base+":o"; got != want {
					t.Fatalf("OverrideKey: got %q, want %q", got, want)
				}
				if got, want := BanKey(key), base+":b"; got != want {
					t.Fatalf("BanKey: got %q, want %q", got, want)
				}
				// an earlier release's override, after the state key
				if err := client.HSet(ctx, key+":o", "e", 100, "b", 100).Err(); err != nil {
					t.Fatal(err)
				}
				if d := req("a"); !d.Allowed || d.Override != (algorithms.Override{Events: 100, Burst: 100}) {
					t.Fatalf("with an override at the old name: got %+v, want admitted under 100", d)
				}
				// an earlier release's ban, after the state key
				end := t0.Add(time.Hour).UnixMicro()
				if err := client.Set(ctx, key+":b", end, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
				if d := req("b"); d.Allowed || !d.Banned || d.RetryAfter != time.Hour {
					t.Fatalf("with a ban at the old name: got %+v, want banned for an hour", d)
				}
				if err := s.Reset(ctx, key); err != nil {
					t.Fatal(err)
				}
				wantKeys(t, client, map[string]bool{key + ":b": false, base + ":b": false, key + ":o": true})
				if err := s.SetOverrideAt(ctx, t0, key, algorithms.Override{Events: 1}, 0); err != nil {
					t.Fatal(err)
				}
				wantKeys(t, client, map[string]bool{key + ":o": false, base + ":o": true})
				req("c")
				if d := req("d"); d.Allowed || !d.Banned || d.Override.Events != 1 {
					t.Fatalf("over the new override: got %+v, want the trip, override 1", d)
				}
				if key != base { // concurrency's state key has no format: both names are one
					wantKeys(t, client, map[string]bool{base + ":b": true, key + ":b": false})
				}
				for _, k := range []string{key, base + ":b"} {
					if ttl := client.PTTL(ctx, k).Val(); ttl <= 0 {
						t.Errorf("%s: PTTL %v, want an expiry", k, ttl)
					}
				}
				if err := client.HSet(ctx, key+":o", "e", 100, "b", 100).Err(); err != nil {
					t.Fatal(err)
				}
				if err := s.ClearOverride(ctx, key); err != nil {
					t.Fatal(err)
				}
				wantKeys(t, client, map[string]bool{key + ":o": false, base + ":o": false})
			})
		}
	}
}

// wantKeys checks which of keys exist.
func wantKeys(t *testing.T, client *redis.Client, keys map[string]bool) {
	t.Helper()
	for k, want := range keys {
		n, err := client.Exists(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := n == 1; got != want {
			t.Errorf("%s exists: got %v, want %v", k, got, want)
		}
	}
}

// BenchmarkOverrideBanZones decides one-zone token_bucket requests (10^5
// keys with a format suffix, all admitted, none overridden or banned) of a
// plain zone, one with overrides, one with a ban, and one with both, and
// reports Redis's time in the script per decision (script-ns/op): what
// reading a key's override and ban costs, the names of earlier releases
// included.
// Run: go test -run '^$' -bench OverrideBanZones -benchtime 20000x ./redisstore
func BenchmarkOverrideBanZones(b *testing.B) {
	srv := redistest.Start(b)
	stats := srv.Client(b)
	limit := algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1 << 29, Window: time.Hour}
	for _, v := range []struct {
		name      string
		overrides bool
		ban       int32
	}{{"plain", false, 0}, {"overrides", true, 0}, {"ban", false, 3600}, {"overrides+ban", true, 3600}} {
		b.Run(v.name, func(b *testing.B) {
			store := New(srv.Client(b), Options{})
			if err := store.Warm(context.Background()); err != nil {
				b.Fatal(err)
			}
			work0 := measureRedis(b, stats, "fcall", "evalsha", "eval")
			b.ResetTimer()
			for i := range b.N {
				key := fmt.Sprintf("bench:%s:{%d}:v5", v.name, i*7919%100_000)
				reqs := []algorithms.Request{{Key: key, Limit: limit, Cost: 1, Overrides: v.overrides, BanSeconds: v.ban}}
				if _, err := store.Allow(context.Background(), reqs); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			work0.report(b, stats, float64(b.N))
		})
	}
}
