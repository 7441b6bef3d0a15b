package sluice

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
	"github.com/sluicehq/caddy-sluice/redisstore"
)

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
