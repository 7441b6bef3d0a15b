package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// listingStore is a store that sets, clears and lists overrides, on the
// caller's clock for the ends.
type listingStore interface {
	overridingStore
	SetOverride(ctx context.Context, key string, o algorithms.Override, ttl time.Duration) error
	algorithms.OverrideLister
}

// listAll follows ListOverrides' pages of n from the first to the last,
// failing t on a page of more than n, an error, or a page out of order.
func listAll(t *testing.T, s algorithms.OverrideLister, prefix string, n int) ([]algorithms.ListedOverride, int) {
	t.Helper()
	var all []algorithms.ListedOverride
	after, pages := "", 0
	for {
		list, next, err := s.ListOverrides(context.Background(), prefix, after, n)
		if err != nil {
			t.Fatalf("ListOverrides(%q, %q, %d): %v", prefix, after, n, err)
		}
		pages++
		if len(list) > n {
			t.Fatalf("page %d: %d overrides, more than n=%d", pages, len(list), n)
		}
		all = append(all, list...)
		if next == "" {
			break
		}
		if len(list) == 0 || next != list[len(list)-1].Hash {
			t.Fatalf("page %d: next %q, want the last hash listed (%d listed)", pages, next, len(list))
		}
		after = next
		if pages > 100 {
			t.Fatal("more than 100 pages")
		}
	}
	if !slices.IsSortedFunc(all, func(a, b algorithms.ListedOverride) int { return strings.Compare(a.Hash, b.Hash) }) {
		t.Fatalf("pages not in hash order: %v", hashes(all))
	}
	return all, pages
}

func hashes(list []algorithms.ListedOverride) []string {
	out := make([]string, len(list))
	for i, o := range list {
		out[i] = o.Hash
	}
	return out
}

// TestListOverrides: on the memory store and on Redis (Functions and
// scripts) alike, a zone's overrides are listed by hash, in pages that
// together hold each override in force once: with its events, capacity,
// time left and, only where the setter passed it, the expanded key; never
// another zone's, a cleared one or one that ended.
func TestListOverrides(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	for name, s := range everyStore[listingStore](client) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := fmt.Sprintf("sluice:%s:", name) // the stores share the server: a zone each
			key := func(h string) string { return prefix + "{" + h + "}:v2" }
			// hashes sharing their first bytes (one score in Redis's index)
			// and not: pages must cut between equal scores too
			hs := []string{"AAAAAAAAb", "AAAAAAAAa", "AAAAAAAA", "zz+/9", "Q", "AAAAAB", "m0"}
			for i, h := range hs {
				sctx := ctx
				if i%2 == 0 {
					sctx = algorithms.WithOverrideKey(ctx, "raw-"+h)
				}
				var ttl time.Duration
				if i == 3 {
					ttl = time.Hour
				}
				if err := s.SetOverride(sctx, key(h), algorithms.Override{Events: int32(10 + i), Burst: int32(20 * (i % 2))}, ttl); err != nil {
					t.Fatal(err)
				}
			}
			// another zone whose prefix extends this one's, and a cleared key
			if err := s.SetOverride(ctx, prefix+"x:{AAAAAAAAc}", algorithms.Override{Events: 1}, 0); err != nil {
				t.Fatal(err)
			}
			if err := s.SetOverride(ctx, key("gone"), algorithms.Override{Events: 1}, 0); err != nil {
				t.Fatal(err)
			}
			if err := s.ClearOverride(ctx, key("gone")); err != nil {
				t.Fatal(err)
			}
			// ended: set an hour and a second ago for an hour
			if err := s.SetOverrideAt(ctx, time.Now().Add(-time.Hour-time.Second), key("ended"), algorithms.Override{Events: 1}, time.Hour); err != nil {
				t.Fatal(err)
			}
			want := slices.Clone(hs)
			slices.Sort(want)
			for _, n := range []int{1, 2, 3, 100} {
				all, pages := listAll(t, s, prefix, n)
				if got := hashes(all); !slices.Equal(got, want) {
					t.Fatalf("n=%d: listed %v, want %v", n, got, want)
				}
				if wantPages := (len(want) + n - 1) / n; pages != wantPages {
					t.Errorf("n=%d: %d pages, want %d", n, pages, wantPages)
				}
			}
			all, _ := listAll(t, s, prefix, 100)
			for _, o := range all {
				i := slices.Index(hs, o.Hash)
				wantKey := ""
				if i%2 == 0 {
					wantKey = "raw-" + o.Hash
				}
				wantCap := int32(20 * (i % 2))
				if wantCap == 0 {
					wantCap = int32(10 + i)
				}
				if o.Key != wantKey || o.Override.Events != int32(10+i) || o.Override.Burst != wantCap {
					t.Errorf("%s: %+v, want key %q, events %d, capacity %d", o.Hash, o, wantKey, 10+i, wantCap)
				}
				if i == 3 {
					if o.ExpiresIn <= 59*time.Minute || o.ExpiresIn > time.Hour {
						t.Errorf("%s: expires in %v, want just under 1h", o.Hash, o.ExpiresIn)
					}
				} else if o.ExpiresIn != 0 {
					t.Errorf("%s: expires in %v, want 0 (until cleared)", o.Hash, o.ExpiresIn)
				}
			}
			// a cursor between hashes, and past the last
			if list, next, err := s.ListOverrides(ctx, prefix, "AAAAAAAAa", 2); err != nil || !slices.Equal(hashes(list), []string{"AAAAAAAAb", "AAAAAB"}) || next != "AAAAAB" {
				t.Errorf("after AAAAAAAAa: %v, next %q, %v; want [AAAAAAAAb AAAAAB], next AAAAAB", hashes(list), next, err)
			}
			if list, next, err := s.ListOverrides(ctx, prefix, "zz+/9", 2); err != nil || len(list) != 0 || next != "" {
				t.Errorf("after the last: %v, next %q, %v; want none", hashes(list), next, err)
			}
			if other, _ := listAll(t, s, prefix+"x:", 10); !slices.Equal(hashes(other), []string{"AAAAAAAAc"}) {
				t.Errorf("the other zone lists %v, want [AAAAAAAAc]", hashes(other))
			}
		})
	}
}

// TestOverrideIndexPruned: on Redis, listing drops from the zone's index
// the hashes of overrides that ended or vanished (deleted under Sluice's
// feet), keeps the rest, and a clear removes its hash in the same MULTI;
// a prune that finds the override set again puts its hash back.
func TestOverrideIndexPruned(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	s := New(client, Options{})
	ctx := context.Background()
	prefix := "sluice:p:"
	index := OverrideIndexKey(prefix)
	key := func(h string) string { return prefix + "{" + h + "}" }
	for _, h := range []string{"keep", "vanish", "cleared"} {
		if err := s.SetOverride(ctx, key(h), algorithms.Override{Events: 5}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetOverrideAt(ctx, time.Now().Add(-2*time.Hour), key("ended"), algorithms.Override{Events: 5}, time.Hour); err != nil {
		t.Fatal(err)
	}
	members := func() []string {
		t.Helper()
		m, err := client.ZRange(ctx, index, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(m)
		return m
	}
	if got := members(); !slices.Equal(got, []string{"cleared", "ended", "keep", "vanish"}) {
		t.Fatalf("index after the sets: %v", got)
	}
	if err := s.ClearOverride(ctx, key("cleared")); err != nil {
		t.Fatal(err)
	}
	if got := members(); !slices.Equal(got, []string{"ended", "keep", "vanish"}) {
		t.Fatalf("index after the clear: %v, want cleared gone", got)
	}
	if err := client.Del(ctx, OverrideKey(key("vanish"))).Err(); err != nil {
		t.Fatal(err)
	}
	// a page of 1 skips ended to fill itself with keep; vanish, after it,
	// is not read yet
	list, next, err := s.ListOverrides(ctx, prefix, "", 1)
	if err != nil || !slices.Equal(hashes(list), []string{"keep"}) || next != "keep" {
		t.Fatalf("first page: %v, next %q, %v; want [keep], next keep", hashes(list), next, err)
	}
	if got := members(); !slices.Equal(got, []string{"keep", "vanish"}) {
		t.Errorf("index after the first page: %v, want [keep vanish]", got)
	}
	list, next, err = s.ListOverrides(ctx, prefix, next, 1)
	if err != nil || len(list) != 0 || next != "" {
		t.Fatalf("second page: %v, next %q, %v; want none, and no next", hashes(list), next, err)
	}
	if got := members(); !slices.Equal(got, []string{"keep"}) {
		t.Errorf("index after the second page: %v, want [keep]", got)
	}
	// a prune racing a set: the hash it found ended is set again before it drops it
	if err := s.pruneIndex(ctx, index, []string{"keep"}, time.Now().UnixMicro()); err != nil {
		t.Fatal(err)
	}
	if got := members(); !slices.Equal(got, []string{"keep"}) {
		t.Errorf("index after pruning a hash whose override is in force: %v, want it put back", got)
	}
	// the raw key only where given
	if got, err := client.HExists(ctx, OverrideKey(key("keep")), "k").Result(); err != nil || got {
		t.Errorf("override set without a key holds field k: %v, %v", got, err)
	}
}

// TestListOverridesCluster: on Redis Cluster the index is one key, written
// in calls of its own (a MULTI cannot span slots); keys of every slot are
// listed, each once, and a clear unlists its key.
func TestListOverridesCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	client := cluster.Client(t)
	s := New(client, Options{})
	ctx := context.Background()
	prefix := "sluice:c:"
	var want []string
	for i := range 40 { // hash tags of 40 keys: slots on every master
		h := fmt.Sprintf("h%02d", i)
		want = append(want, h)
		if err := s.SetOverride(algorithms.WithOverrideKey(ctx, "k"+h), prefix+"{"+h+"}", algorithms.Override{Events: int32(i + 1)}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	masters := map[string]bool{}
	for _, h := range want {
		m, err := client.MasterForKey(ctx, OverrideKey(prefix+"{"+h+"}"))
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) < 2 {
		t.Fatalf("the overrides live on %d master(s): the test needs several", len(masters))
	}
	all, _ := listAll(t, s, prefix, 7)
	if got := hashes(all); !slices.Equal(got, want) {
		t.Fatalf("listed %v, want %v", got, want)
	}
	for _, o := range all {
		if o.Key != "k"+o.Hash || o.ExpiresIn <= 0 || o.ExpiresIn > time.Hour {
			t.Errorf("%s: %+v, want key k%s and an end within the hour", o.Hash, o, o.Hash)
		}
	}
	if err := s.ClearOverride(ctx, prefix+"{h05}"); err != nil {
		t.Fatal(err)
	}
	if got, err := client.ZScore(ctx, OverrideIndexKey(prefix), "h05").Result(); err != redis.Nil {
		t.Errorf("h05 cleared, still in the index: %v, %v", got, err)
	}
	all, _ = listAll(t, s, prefix, 100)
	if got := hashes(all); slices.Contains(got, "h05") || len(got) != len(want)-1 {
		t.Errorf("after clearing h05: %v", got)
	}
}
