package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// oomNode makes the master of key refuse writes (maxmemory 1 byte, no
// eviction) until the test ends.
func oomNode(t *testing.T, client *redis.ClusterClient, key string) {
	t.Helper()
	ctx := context.Background()
	node, err := client.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := node.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := node.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.ConfigSet(ctx, "maxmemory", "0").Err() })
}

// TestClusterDenialWinsOverFailure: on Cluster, when one zone's slot fails
// and another zone denied, the request is denied without an error, so that
// failure_mode open cannot admit a request over a spent zone; with no
// denial, the failure is reported.
func TestClusterDenialWinsOverFailure(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	client := cluster.Client(t)
	store := New(client, Options{})
	ctx := context.Background()
	tests := []struct {
		name      string
		events    int64 // of the healthy zone, already spent once
		wantError bool
	}{
		{"spent zone denies", 1, false},
		{"healthy zone admits", 10, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := rand.Int64()
			failing := algorithms.Request{Key: fmt.Sprintf("failing:%d:{a}", id), Cost: 1,
				Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 10, Window: time.Hour}}
			healthy := algorithms.Request{Key: fmt.Sprintf("healthy:%d:{b}", id), Cost: 1,
				Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: tt.events, Window: time.Hour}}
			if _, err := store.Allow(ctx, []algorithms.Request{healthy}); err != nil {
				t.Fatal(err)
			}
			oomNode(t, client, failing.Key)
			reqs := []algorithms.Request{failing, healthy}
			ds, err := store.Allow(ctx, reqs)
			if got := err != nil; got != tt.wantError {
				t.Fatalf("error: got %v, want an error: %v", err, tt.wantError)
			}
			if err == nil && algorithms.Admitted(reqs, ds) {
				t.Error("a request over a spent zone was admitted")
			}
			after, err := store.Peek(ctx, []algorithms.Request{healthy})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := after[0].Remaining, tt.events-1; got != want {
				t.Errorf("healthy zone after the failed request: got remaining %d, want %d (refunded)", got, want)
			}
		})
	}
}

// refundHook records the deadlines of the refund calls.
type refundHook struct {
	mu        sync.Mutex
	deadlines []time.Duration // until the deadline at the call; -1: none
}

func (h *refundHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *refundHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *refundHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		for _, a := range cmd.Args() {
			if a == "settle" { // a refund is a settlement
				left := time.Duration(-1)
				if deadline, ok := ctx.Deadline(); ok {
					left = time.Until(deadline)
				}
				h.mu.Lock()
				h.deadlines = append(h.deadlines, left)
				h.mu.Unlock()
			}
		}
		return next(ctx, cmd)
	}
}

// TestClusterRefundHasDeadline: a refund does not wait on the request's
// context, which a leaving client may end, but it has a deadline of its
// own: the refund timeout.
func TestClusterRefundHasDeadline(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	client := cluster.Client(t)
	hook := new(refundHook)
	client.AddHook(hook)
	const timeout = 250 * time.Millisecond
	store := New(client, Options{RefundTimeout: timeout})
	id := rand.Int64()
	reqs := []algorithms.Request{
		{Key: fmt.Sprintf("loose:%d:{a}", id), Cost: 1, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 10, Window: time.Hour}},
		{Key: fmt.Sprintf("tight:%d:{b}", id), Cost: 1, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Hour}},
	}
	if _, err := store.Allow(context.Background(), reqs[1:]); err != nil { // spends tight
		t.Fatal(err)
	}
	if _, err := store.Allow(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if got, want := len(hook.deadlines), 1; got != want {
		t.Fatalf("refund calls: got %d, want %d", got, want)
	}
	if left := hook.deadlines[0]; left <= 0 || left > timeout {
		t.Errorf("refund deadline: got %v ahead (-1: none), want within %v", left, timeout)
	}
}
