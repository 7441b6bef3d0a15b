package algorithms

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// waitBatcher waits until cond holds of b (under b.mu): a condition, not a
// sleep, decides when a test goes on.
func waitBatcher(t *testing.T, b *batcher, what string, cond func(b *batcher) bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b.mu.Lock()
		ok := cond(b)
		b.mu.Unlock()
		if ok {
			return
		}
	}
	t.Fatalf("batcher: %s never happened", what)
}

// TestLeaderAnswersByOwnDeadline: with Redis paused (SIGSTOP), a request
// that leads a batch with a peer of a much longer deadline answers with its
// own deadline's error, before the peer's deadline: it is not held until
// the latest deadline in its batch.
func TestLeaderAnswersByOwnDeadline(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	s := NewRedisStoreWith(client, RedisOptions{InFlight: 1})
	if err := s.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	limit := Limit{Algorithm: FixedWindow, Events: 100, Window: time.Hour}
	reqs := []Request{{Key: fmt.Sprint("deadline:", rand.Int64()), Limit: limit, Cost: 1}}
	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Signal(syscall.SIGCONT) })

	// first holds the one call in flight until its 200 ms deadline ...
	firstCtx, cancelFirst := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelFirst()
	firstDone := make(chan error, 1)
	go func() { _, err := s.Allow(firstCtx, reqs); firstDone <- err }()
	waitBatcher(t, s.batcher, "first call out", func(b *batcher) bool { return b.running == 1 })
	// ... while short (160 ms from its turn) and long (3 s) queue behind it
	shortCtx, cancelShort := context.WithTimeout(context.Background(), 360*time.Millisecond)
	defer cancelShort()
	type result struct {
		err     error
		ownDone bool      // short's own ctx had ended when it returned
		at      time.Time // when it returned
	}
	shortDone := make(chan result, 1)
	go func() {
		_, err := s.Allow(shortCtx, reqs)
		shortDone <- result{err, shortCtx.Err() != nil, time.Now()}
	}()
	waitBatcher(t, s.batcher, "short queued", func(b *batcher) bool { return len(b.queue) == 1 })
	longCtx, cancelLong := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancelLong()
	longDeadline, _ := longCtx.Deadline()
	longDone := make(chan error, 1)
	go func() { _, err := s.Allow(longCtx, reqs); longDone <- err }()
	waitBatcher(t, s.batcher, "long queued", func(b *batcher) bool { return len(b.queue) == 2 })

	if err := <-firstDone; err == nil {
		t.Fatal("first: got no error from a paused Redis, want one")
	}
	got := <-shortDone // short now leads [short, long]
	if !errors.Is(got.err, context.DeadlineExceeded) || !got.ownDone {
		t.Errorf("short: got %v (own deadline passed: %v), want its own deadline's error", got.err, got.ownDone)
	}
	if !got.at.Before(longDeadline) {
		t.Errorf("short returned at %v, after its peer's deadline %v: held for the batch", got.at, longDeadline)
	}
	// Redis goes on: the long request's call completes and decides it
	if err := srv.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := <-longDone; err != nil {
		t.Errorf("long: got %v, want decided once Redis resumed", err)
	}
	if _, err := s.Allow(context.Background(), reqs); err != nil {
		t.Errorf("after: got %v, want decided", err)
	}
}

// TestPanickingSendReleasesBatcher: a send that panics fails its batch
// with an error and leaves the batcher free: later decisions do not wait
// out their timeouts behind it.
func TestPanickingSendReleasesBatcher(t *testing.T) {
	b := &batcher{inFlight: 1}
	b.send = func(_ context.Context, batch []*pending) {
		for _, p := range batch {
			if p.mode == "boom" {
				panic("send exploded")
			}
			p.ds = []Decision{{Allowed: true}}
		}
	}
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panicked: %v", r)
			}
		}()
		return b.do(context.Background(), &pending{mode: "boom"})
	}()
	if err == nil {
		t.Fatal("panicking send: got no error, want one")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		if err := b.do(ctx, &pending{mode: modeConsume}); err != nil {
			t.Fatalf("decision %d after the panic: got %v, want decided", i, err)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running != 0 {
		t.Errorf("calls out after the panic: got %d, want 0", b.running)
	}
}
