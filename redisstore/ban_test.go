package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/leasetwin"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

type banningStore interface {
	clockedStore
	Reset(ctx context.Context, key string) error
}

// TestBans drives the same steps on the memory store and on Redis
// (Functions and scripts), which must agree on every value: the request a
// zone with a ban denies trips it (banned, started here, Retry-After the
// ban, r=0); while it lasts the key is denied with the ban's remaining
// time and the request consumes nothing in its other zone; it ends by
// itself; Reset lifts it; a dry-run zone never bans.
func TestBans(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	stores := everyStore[banningStore](client)
	type step struct {
		at         time.Duration
		reset      bool // Reset the ban zone's key before the request
		allowed    bool
		banned     bool
		started    bool
		retry      time.Duration // the ban zone's
		remaining  int64         // the ban zone's
		otherLeft  int64         // the other zone's remaining
		otherAllow bool
	}
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 2, Window: time.Minute}
	other := algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 100, Window: time.Hour}
	steps := []step{
		{0, false, true, false, false, 0, 1, 99, true},
		{time.Second, false, true, false, false, 0, 0, 98, true},
		{2 * time.Second, false, false, true, true, 10 * time.Second, 0, 98, true}, // the trip
		{5 * time.Second, false, false, true, false, 7 * time.Second, 0, 98, true}, // banned: nothing consumed
		{11500 * time.Millisecond, false, false, true, false, 500 * time.Millisecond, 0, 98, true},
		{61 * time.Second, false, true, false, false, 0, 1, 97, true}, // ended by itself; a new window
		{62 * time.Second, false, true, false, false, 0, 0, 96, true},
		{63 * time.Second, false, false, true, true, 10 * time.Second, 0, 96, true}, // tripped again
		{64 * time.Second, true, true, false, false, 0, 1, 95, true},                // lifted by Reset
	}
	for name, s := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			id := rand.Int64()
			key, otherKey := fmt.Sprintf("ban:{%d}", id), fmt.Sprintf("other:{%d}", id)
			for i, st := range steps {
				if st.reset {
					if err := s.Reset(ctx, key); err != nil {
						t.Fatal(err)
					}
				}
				reqs := []algorithms.Request{
					{Key: key, Limit: limit, Cost: 1, BanSeconds: 10},
					{Key: otherKey, Limit: other, Cost: 1},
				}
				ds, err := s.AllowAt(ctx, t0.Add(st.at), reqs)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				d := ds[0]
				if d.Allowed != st.allowed || d.Banned != st.banned || d.BanStarted != st.started ||
					(!d.Allowed && d.RetryAfter != st.retry) || d.Remaining != st.remaining {
					t.Errorf("step %d at %v: got allowed=%v banned=%v started=%v retry=%v remaining=%d, want %v %v %v %v %d",
						i, st.at, d.Allowed, d.Banned, d.BanStarted, d.RetryAfter, d.Remaining,
						st.allowed, st.banned, st.started, st.retry, st.remaining)
				}
				if ds[1].Remaining != st.otherLeft || ds[1].Allowed != st.otherAllow || ds[1].Banned {
					t.Errorf("step %d at %v: other zone got allowed=%v remaining=%d banned=%v, want %v %d false",
						i, st.at, ds[1].Allowed, ds[1].Remaining, ds[1].Banned, st.otherAllow, st.otherLeft)
				}
			}
		})
	}
}

// TestBanDryRunAndPeek: a dry-run zone with a ban never bans; a peek of a
// banned key shows the ban and a peek's denial sets none.
func TestBanDryRunAndPeek(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Hour}
	for name, s := range map[string]interface {
		banningStore
		Allow(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error)
		Peek(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error)
	}{"memory": memoryAt{leasetwin.NewMemoryStore()}, "redis": New(srv.Client(t), Options{})} {
		t.Run(name, func(t *testing.T) {
			key := fmt.Sprintf("bandry:{%d}", rand.Int64())
			dry := algorithms.Request{Key: key, Limit: limit, Cost: 1, BanSeconds: 60, DryRun: true}
			for range 3 {
				ds, err := s.Allow(ctx, []algorithms.Request{dry})
				if err != nil {
					t.Fatal(err)
				}
				if ds[0].Banned {
					t.Fatalf("dry-run zone: got banned %+v", ds[0])
				}
			}
			req := dry
			req.DryRun = false
			ds, _ := s.Peek(ctx, []algorithms.Request{req})
			if ds[0].Allowed || ds[0].Banned {
				t.Fatalf("peek of a full key: got %+v, want denied, not banned (a peek sets no ban)", ds[0])
			}
			ds, _ = s.Allow(ctx, []algorithms.Request{req})
			if !ds[0].BanStarted {
				t.Fatalf("the trip: got %+v, want a ban started", ds[0])
			}
			ds, _ = s.Peek(ctx, []algorithms.Request{req})
			if !ds[0].Banned || ds[0].BanStarted || ds[0].RetryAfter <= 59*time.Second {
				t.Fatalf("peek of a banned key: got %+v, want banned for about 60s", ds[0])
			}
		})
	}
}

// TestBanEncoding: a zone without a ban sends the very arguments it always
// has and replies as before; a zone with one only renames its algorithm
// and replies with one more value; a dry-run zone sends no ban.
func TestBanEncoding(t *testing.T) {
	limit := algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 10, Window: time.Second, Burst: 20}
	plain := algorithms.Request{Key: "p:{a}", Limit: limit, Cost: 1}
	for _, tt := range []struct {
		name string
		edit func(*algorithms.Request)
		alg  string
	}{
		{"plain", func(*algorithms.Request) {}, "token_bucket"},
		{"ban", func(r *algorithms.Request) { r.BanSeconds = 3600 }, "token_bucket:b3600"},
		{"ban and overrides", func(r *algorithms.Request) { r.BanSeconds, r.Overrides = 5, true }, "token_bucket:o:b5"},
	} {
		r := plain
		tt.edit(&r)
		c := encode([]*pending{{mode: modeConsume, now: "", reqs: []algorithms.Request{r}}})
		wantArgs := []string{"1  1 " + tt.alg + " 10 1000000 20 1 0  0"}
		if !reflect.DeepEqual(argStrings(c), wantArgs) || !reflect.DeepEqual(c.keys, []string{"p:{a}"}) {
			t.Errorf("%s: got keys %q args %#v, want [p:{a}] %#v", tt.name, c.keys, argStrings(c), wantArgs)
		}
	}
	dry := plain
	dry.BanSeconds, dry.DryRun = 60, true
	if got := algorithmArg(dry); got != "token_bucket" {
		t.Errorf("dry-run zone with a ban: got %q, want token_bucket", got)
	}
	banned := plain
	banned.BanSeconds = 60
	both := banned
	both.Overrides = true
	reqs := []algorithms.Request{plain, banned, both}
	if got := replyWidth(&pending{mode: modeConsume, reqs: reqs}); got != 3*zoneReplyWidth+overrideReplyWidth+2*banReplyWidth {
		t.Fatalf("reply width: got %d", got)
	}
	ds := decisions(reqs, []int64{2*3 + 1, 0, 5, 6, 0, 60e6, 60e6, 60e6, 2, 0, 7e6, 7e6, 7e6, 0, 0, 1}, 9)
	if ds[0].Banned || !ds[1].Banned || !ds[1].BanStarted || !ds[2].Banned || ds[2].BanStarted ||
		ds[1].RetryAfter != time.Minute || ds[2].RetryAfter != 7*time.Second || ds[0].Remaining != 3 {
		t.Fatalf("decisions: got %+v", ds)
	}
}

// TestBansOnCluster: the ban lives in its key's slot; a banned zone
// denies a request of two slots, whose other zone is refunded.
func TestBansOnCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	client := cluster.Client(t)
	store := New(client, Options{})
	ctx := context.Background()
	id := rand.Int64()
	reqs := []algorithms.Request{
		{Key: fmt.Sprintf("banc:%d:{a}", id), Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Hour}, Cost: 1, BanSeconds: 3600},
		{Key: fmt.Sprintf("plain:%d:{b}", id), Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 10, Window: time.Hour}, Cost: 1},
	}
	for i, want := range []string{"admitted", "tripped", "banned", "banned"} {
		ds, err := store.Allow(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		got := "admitted"
		switch {
		case ds[0].BanStarted:
			got = "tripped"
		case ds[0].Banned:
			got = "banned"
		}
		if got != want {
			t.Fatalf("request %d: got %s, want %s (%+v)", i+1, got, want, ds[0])
		}
	}
	if n, err := client.Exists(ctx, BanKey(reqs[0].Key)).Result(); err != nil || n != 1 {
		t.Fatalf("ban key in the key's slot: exists=%d err=%v", n, err)
	}
	ds, err := store.Peek(ctx, reqs[1:])
	if err != nil {
		t.Fatal(err)
	}
	if ds[0].Remaining != 9 {
		t.Errorf("the other slot's zone: remaining %d, want 9 (denied requests refunded)", ds[0].Remaining)
	}
	if err := store.Reset(ctx, reqs[0].Key); err != nil {
		t.Fatal(err)
	}
	if ds, _ := store.Allow(ctx, reqs); !algorithms.Admitted(reqs, ds) {
		t.Fatalf("after Reset: got %+v, want admitted", ds)
	}
}

// TestResetReachesOtherCaches: two instances on one Redis, each with its
// deny cache; a ban cached by B is dropped when A resets the key.
func TestResetReachesOtherCaches(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	a, _ := algorithms.Guard(New(srv.Client(t), Options{}))
	bClient := srv.Client(t)
	b, _ := algorithms.Guard(New(bClient, Options{}))
	forgotten := make(chan string, 4)
	sub := SubscribeResets(bClient, func(key string) {
		b.Forget(key)
		forgotten <- key
	}, nil, nil)
	defer sub.Stop()
	req := []algorithms.Request{{Key: fmt.Sprintf("banr:{%d}", rand.Int64()),
		Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Hour}, Cost: 1, BanSeconds: 3600}}
	_, _ = a.Allow(ctx, req)
	if ds, _ := a.Allow(ctx, req); !ds[0].BanStarted {
		t.Fatalf("A's trip: got %+v", ds[0])
	}
	if ds, _ := b.Allow(ctx, req); !ds[0].Banned || ds[0].Cached {
		t.Fatalf("B, from Redis: got %+v, want banned", ds[0])
	}
	if ds := b.Cached(req); ds == nil || !ds[0].Banned || ds[0].RetryAfter < 3590*time.Second {
		t.Fatalf("B's cache: got %+v, want the ban cached until it ends", ds)
	}
	waitSubscribed(t, bClient)
	if err := a.Reset(ctx, req[0].Key); err != nil {
		t.Fatal(err)
	}
	select {
	case k := <-forgotten:
		if k != req[0].Key {
			t.Fatalf("forgot %q, want %q", k, req[0].Key)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("B never heard of the reset")
	}
	if ds := b.Cached(req); ds != nil {
		t.Fatalf("B's cache after A's reset: got %+v, want nothing", ds)
	}
	if ds, _ := b.Allow(ctx, req); !ds[0].Allowed {
		t.Fatalf("B after the reset: got %+v, want admitted", ds[0])
	}
}

// waitSubscribed waits until Redis counts a subscriber of ResetChannel: a
// message published before would reach no one.
func waitSubscribed(t *testing.T, client interface {
	PubSubNumSub(ctx context.Context, channels ...string) *redis.MapStringIntCmd
}) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := client.PubSubNumSub(context.Background(), ResetChannel).Result()
		if err == nil && n[ResetChannel] > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no subscriber of %s: %v %v", ResetChannel, n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBannedWhateverTheCost: a banned key is answered as banned whatever
// its cost, above its capacity too, on every store alike, with and without
// overrides: the ban is read before the cost is checked. A cost above
// capacity from a key not banned is denied for the window and bans
// nothing.
func TestBannedWhateverTheCost(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	stores := everyStore[banningStore](client)
	type step struct {
		cost            int64
		allowed, banned bool
		started         bool
		retry           time.Duration
	}
	const ban = time.Hour
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 2, Window: time.Minute}
	steps := []step{
		{3, false, false, false, time.Minute}, // over capacity: no ban
		{1, true, false, false, 0},
		{1, true, false, false, 0},
		{1, false, true, true, ban}, // the trip
		{3, false, true, false, ban},
		{1, false, true, false, ban},
	}
	for name, s := range stores {
		for _, overrides := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/overrides=%v", name, overrides), func(t *testing.T) {
				ctx := context.Background()
				key := fmt.Sprintf("bancost:{%d}", rand.Int64())
				for i, st := range steps {
					ds, err := s.AllowAt(ctx, t0, []algorithms.Request{{Key: key, Limit: limit, Cost: st.cost,
						Overrides: overrides, BanSeconds: int32(ban / time.Second)}})
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					d := ds[0]
					if d.Allowed != st.allowed || d.Banned != st.banned || d.BanStarted != st.started || d.RetryAfter != st.retry {
						t.Errorf("step %d cost %d: got allowed=%v banned=%v started=%v retry=%v, want %v %v %v %v",
							i, st.cost, d.Allowed, d.Banned, d.BanStarted, d.RetryAfter, st.allowed, st.banned, st.started, st.retry)
					}
				}
			})
		}
	}
}
