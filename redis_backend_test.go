package sluice

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
	"github.com/sluicehq/caddy-sluice/redisstore"
)

// TestCause: store failures are named from the errors the Redis store
// really returns, including errors raised inside the decide script.
func TestCause(t *testing.T) {
	full := redistest.Start(t)
	if err := full.Client(t).ConfigSet(context.Background(), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	primary := redistest.Start(t)
	_, port, err := net.SplitHostPort(primary.Addr)
	if err != nil {
		t.Fatal(err)
	}
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", port)

	tests := []struct {
		name string
		addr string
		ctx  func() (context.Context, context.CancelFunc)
		skew bool // a period zone's boundaries 3 days behind Redis's clock
		want string
	}{
		{"out of memory inside the script", full.Addr, background, false, "out_of_memory"},
		{"a write on a replica inside the script", replica.Addr, background, false, "unavailable"},
		{"connection refused", closedPort(t), background, false, "connection"},
		{"deadline", primary.Addr, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Nanosecond)
		}, false, "timeout"},
		{"clock skew on a period zone", primary.Addr, background, true, "clock_skew"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: tt.addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = client.Close() })
			ctx, cancel := tt.ctx()
			defer cancel()
			req := []algorithms.Request{{Key: "cause:" + tt.name, Cost: 1,
				Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 5, Window: time.Hour}}}
			if tt.skew {
				day := algorithms.Calendar{Period: algorithms.PeriodDay, Location: time.UTC}
				req[0].Limit.Window, req[0].Limit.Calendar = 0, day
				req[0].Limit.Periods = day.PeriodsAt(time.Now().Add(-72 * time.Hour))
			}
			_, err := redisstore.New(client, redisstore.Options{}).Allow(ctx, req)
			if err == nil {
				t.Fatal("got no error, want a failure")
			}
			if got := cause(err); got != tt.want {
				t.Errorf("cause(%v): got %q, want %q", err, got, tt.want)
			}
		})
	}
	if got, want := cause(fmt.Errorf("deciding: %w", algorithms.ErrCircuitOpen)), "circuit_open"; got != want {
		t.Errorf("cause of an open breaker: got %q, want %q", got, want)
	}
}

func background() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}

// TestResubscribeForgetsCachedBans: a ban lifted (by another instance's
// DELETE) while this instance's reset subscription is down is not
// announced to it; once the subscription is back, the cached ban is gone,
// and the key is decided by Redis again.
func TestResubscribeForgetsCachedBans(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	store := redisstore.New(client, redisstore.Options{})
	cache, _ := algorithms.Guard(store)
	sub := subscribeResets(store, stores{cache: cache, label: "resubscribe"}, zap.NewNop())
	defer resetSubscriptions.Delete(sub)
	defer sub.Stop()
	waitLive(t, sub, true)
	req := []algorithms.Request{{Key: fmt.Sprintf("resub:{%d}", rand.Int64()),
		Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Hour}, Cost: 1, BanSeconds: 3600}}
	_, _ = cache.Allow(ctx, req)
	if ds, err := cache.Allow(ctx, req); err != nil || !ds[0].BanStarted {
		t.Fatalf("the trip: got %+v, %v; want a ban", ds, err)
	}
	if ds := cache.Cached(req); ds == nil || !ds[0].Banned {
		t.Fatalf("cache: got %+v, want the ban", ds)
	}
	if err := srv.Client(t).ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub: %v", err)
	}
	waitLive(t, sub, false)
	other := redisstore.New(srv.Client(t), redisstore.Options{})
	err := other.Reset(ctx, req[0].Key) // announced to no one: the subscription is down
	if err != nil {
		t.Fatalf("the other instance's reset: %v", err)
	}
	if ds := cache.Cached(req); ds == nil {
		t.Fatal("the ban was forgotten while the subscription was down: the test proves nothing")
	}
	waitLive(t, sub, true)
	for i := 0; cache.Cached(req) != nil; i++ {
		if i == 500 {
			t.Fatal("the subscription is back, and the lifted ban is still cached")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ds, err := cache.Allow(ctx, req); err != nil || !ds[0].Allowed {
		t.Fatalf("after the lift: got %+v, %v; want admitted", ds, err)
	}
}

// waitLive waits until sub's liveness is live.
func waitLive(t *testing.T, sub algorithms.Subscription, live bool) {
	t.Helper()
	for i := 0; sub.Live() != live; i++ {
		if i == 1000 {
			t.Fatalf("reset subscription live %v, want %v", !live, live)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitSubscribed waits until h's reset subscription is live: its first
// subscription drops every denial cached before it, so a test that
// counts what the deny cache answers starts after it.
func waitSubscribed(t *testing.T, h *Handler) {
	t.Helper()
	shared, ok := sharedOf(h)
	if !ok {
		t.Fatal("no shared Redis client")
	}
	waitLive(t, shared.resets, true)
}

// subscriberAt lets a test say when a reset subscription fails and when it
// is up, as redisstore's does on Redis's answers.
type subscriberAt struct {
	failed func(error, time.Duration)
	up     func()
}

func (s *subscriberAt) SubscribeResets(_ func(string), failed func(error, time.Duration), up func()) algorithms.Subscription {
	s.failed, s.up = failed, up
	return s
}
func (s *subscriberAt) Live() bool { return s.up != nil }
func (s *subscriberAt) Stop()      {}

// TestFirstSubscriptionForgetsCachedDenials: a subscription refused from
// the start (a user without the channel) and granted later never heard
// the resets published meanwhile, so its first success drops every cached
// denial, as a resubscription does.
func TestFirstSubscriptionForgetsCachedDenials(t *testing.T) {
	st := remoteStores("redis", algorithms.NewMemoryStore(), "first-up", nil, zap.NewNop())
	reqs := []algorithms.Request{{Key: "k", Cost: 1, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Hour}}}
	ctx := context.Background()
	_, _ = st.cache.Allow(ctx, reqs)
	if ds, err := st.cache.Allow(ctx, reqs); err != nil || ds[0].Allowed {
		t.Fatalf("second request: got %+v, %v; want denied", ds, err)
	}
	sub := &subscriberAt{}
	defer resetSubscriptions.Delete(subscribeResets(sub, st, zap.NewNop()))
	sub.failed(errors.New("NOPERM this user has no permissions to access the 'sluice:reset' channel"), time.Second)
	if st.cache.Cached(reqs) == nil {
		t.Fatal("the denial is not cached: the test proves nothing")
	}
	sub.up()
	if ds := st.cache.Cached(reqs); ds != nil {
		t.Errorf("after the first subscription: cached %+v, want none", ds)
	}
}
