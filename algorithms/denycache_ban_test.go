package algorithms

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestDenyCacheAnswersBans: in a zone with a ban, a banned request is
// answered from the cache whether the zone settles, has overrides or both
// (a banned request consumes nothing, so caching it is exact), with the
// override in force for the headers and whatever its concurrency slot;
// a denial of such a zone that is no ban is never cached, and a zone
// without a ban that settles caches nothing.
func TestDenyCacheAnswersBans(t *testing.T) {
	ctx := context.Background()
	limit := Limit{Algorithm: FixedWindow, Events: 2, Window: time.Hour}
	tests := []struct {
		name              string
		settles, override bool
		ban               int32
		wantCached        bool
	}{
		{"settles", true, false, 3600, true},
		{"overrides", false, true, 3600, true},
		{"settles and overrides", true, true, 3600, true},
		{"settles without a ban", true, false, 0, false},
		{"overrides without a ban", false, true, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := NewMemoryStore()
			c := NewDenyCache(mem)
			key := fmt.Sprintf("ban-%s", tt.name)
			if tt.override {
				if err := c.SetOverride(ctx, key, Override{Events: 2}, 0); err != nil { // as the zone: the override shows in the decisions
					t.Fatal(err)
				}
			}
			req := func(slot string) []Request {
				return []Request{{Key: key, Limit: limit, Cost: 1, Settles: tt.settles, Overrides: tt.override, BanSeconds: tt.ban, Slot: slot}}
			}
			for i := range 2 { // within the limit
				if ds, _ := c.Allow(ctx, req(fmt.Sprint(i))); !ds[0].Allowed {
					t.Fatalf("request %d: denied", i)
				}
			}
			if ds, _ := c.Allow(ctx, req("trip")); ds[0].Allowed || ds[0].Banned != (tt.ban > 0) || ds[0].Cached {
				t.Fatalf("the trip: got %+v, want denied by the store, banned %v", ds[0], tt.ban > 0)
			}
			ds := c.Cached(req("later"))
			if got := ds != nil; got != tt.wantCached {
				t.Fatalf("after the trip: cached %v, want %v", got, tt.wantCached)
			}
			if ds == nil {
				return
			}
			if ds[0].Allowed || !ds[0].Banned || ds[0].RetryAfter <= 59*time.Minute || ds[0].Override.Set() != tt.override {
				t.Errorf("cached: got %+v, want the ban's denial, override %v", ds[0], tt.override)
			}
		})
	}
}

// TestDenyCacheSettlingDenialNotCached: a denial of a settling zone with a
// ban that is no ban (a dry-run zone never bans) is not cached: a refund
// may bring its quota back early.
func TestDenyCacheSettlingDenialNotCached(t *testing.T) {
	c := NewDenyCache(&denyingStore{retry: time.Minute})
	reqs := []Request{{Key: "k", Limit: boundLimit, Cost: 1, Settles: true, BanSeconds: 60}}
	if _, err := c.Allow(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	if ds := c.Cached(reqs); ds != nil {
		t.Errorf("a settling zone's plain denial: cached %+v", ds)
	}
}

// gatedStore denies every request with a ban of an hour, each reply held
// until release is closed; entered says that a call has read.
type gatedStore struct {
	Store            // the rest of the contract, which these tests never call
	entered, release chan struct{}
}

func (s *gatedStore) Allow(_ context.Context, reqs []Request) ([]Decision, error) {
	s.entered <- struct{}{}
	<-s.release
	ds := make([]Decision, len(reqs))
	for i := range ds {
		ds[i] = Decision{RetryAfter: time.Hour, ResetAfter: time.Hour, MoreAfter: time.Hour, Banned: true}
	}
	return ds, nil
}

// TestDenyCacheResetNotUndone: a decision that read a ban before the key
// was reset (Forget: an admin DELETE here or on another instance), and
// whose answer arrives after, is not cached: the reset stands, and the
// next request asks the store again. A decision read after the reset is
// cached as ever.
func TestDenyCacheResetNotUndone(t *testing.T) {
	g := &gatedStore{entered: make(chan struct{}), release: make(chan struct{})}
	c := NewDenyCache(g)
	reqs := []Request{{Key: "k", Limit: boundLimit, Cost: 1, BanSeconds: 3600}}
	done := make(chan []Decision)
	go func() {
		ds, _ := c.AllowUncached(context.Background(), reqs)
		done <- ds
	}()
	<-g.entered // the store has read the ban
	c.Forget("k")
	close(g.release)
	if ds := <-done; ds[0].Allowed || !ds[0].Banned {
		t.Fatalf("the decision in flight: got %+v, want the ban it read", ds[0])
	}
	if ds := c.Cached(reqs); ds != nil {
		t.Fatalf("after the reset: the ban read before it is cached: %+v", ds[0])
	}
	go func() { <-g.entered }()
	if _, err := c.AllowUncached(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	if ds := c.Cached(reqs); ds == nil {
		t.Error("a ban read after the reset: not cached")
	}
}

// TestDenyCacheForgetAll: ForgetAll drops every cached denial, of every
// key and shard, and a decision in flight when it is called is not cached
// (its read may predate a reset that was missed); one read after is.
func TestDenyCacheForgetAll(t *testing.T) {
	open := &gatedStore{entered: make(chan struct{}, 100), release: make(chan struct{})}
	close(open.release)
	c := NewDenyCacheOf(open, 64*denyShardMin)
	for i := range 100 {
		r := []Request{{Key: fmt.Sprintf("k%d", i), Limit: boundLimit, Cost: 1, BanSeconds: 3600}}
		if _, err := c.AllowUncached(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := c.Len(), 100; got != want {
		t.Fatalf("cached: got %d, want %d", got, want)
	}
	g := &gatedStore{entered: make(chan struct{}), release: make(chan struct{})}
	c.next = g
	reqs := []Request{{Key: "flight", Limit: boundLimit, Cost: 1, BanSeconds: 3600}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = c.AllowUncached(context.Background(), reqs)
	}()
	<-g.entered // the store has read the ban
	c.ForgetAll()
	close(g.release)
	<-done
	if got := c.Len(); got != 0 {
		t.Fatalf("after ForgetAll: %d denials cached, want none", got)
	}
	go func() { <-g.entered }()
	if _, err := c.AllowUncached(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	if got, want := c.Len(), 1; got != want {
		t.Errorf("a ban read after ForgetAll: %d cached, want %d", got, want)
	}
}
