package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// movingHook counts the commands go-redis gave up on with a reply that
// says the slot is moving (after its own redirects).
type movingHook struct{ n atomic.Int64 }

func (h *movingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *movingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *movingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if slotMoving(err) {
			h.n.Add(1)
		}
		return err
	}
}

// slotBreak puts a key's slot in a state where no node serves it, and
// mend ends that state.
type slotBreak struct {
	name         string
	want         string // the reply's first word while broken
	break_, mend func(t *testing.T, owner, other *redis.Client, slot int, ownerID, otherID string)
}

var slotBreaks = []slotBreak{
	{
		// the owner believes another node has the slot, which believes
		// the owner has it: each answers MOVED to the other, more times
		// than go-redis follows
		name: "moved back and forth", want: "MOVED",
		break_: func(t *testing.T, owner, _ *redis.Client, slot int, _, otherID string) {
			t.Helper()
			clusterDo(t, owner, "cluster", "setslot", slot, "node", otherID)
		},
		mend: func(t *testing.T, owner, _ *redis.Client, slot int, ownerID, _ string) {
			t.Helper()
			clusterDo(t, owner, "cluster", "setslot", slot, "node", ownerID)
		},
	},
	{
		// the owner drops the slot: it answers CLUSTERDOWN
		name: "slot not served", want: "CLUSTERDOWN",
		break_: func(t *testing.T, owner, _ *redis.Client, slot int, _, _ string) {
			t.Helper()
			clusterDo(t, owner, "cluster", "delslots", slot)
		},
		mend: func(t *testing.T, owner, _ *redis.Client, slot int, _, _ string) {
			t.Helper()
			clusterDo(t, owner, "cluster", "addslots", slot)
		},
	},
}

func clusterDo(t *testing.T, c *redis.Client, args ...any) {
	t.Helper()
	if err := c.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("%v on %s: %v", args, c.Options().Addr, err)
	}
}

// brokenSlot breaks the slot of a new key with b, mended at the test's
// end, and returns the key.
func brokenSlot(t *testing.T, cluster *redistest.Cluster, client *redis.ClusterClient, b slotBreak) (key string, mend func()) {
	t.Helper()
	ctx := context.Background()
	key = fmt.Sprintf("moving:%d:{%s}", rand.Int64(), strings.ReplaceAll(b.name, " ", "-"))
	slot := int(client.ClusterKeySlot(ctx, key).Val())
	var owner, other *redis.Client
	var ownerID, otherID string
	for _, s := range cluster.Servers {
		c := s.Client(t)
		id := c.ClusterMyID(ctx).Val()
		if c.ClusterCountKeysInSlot(ctx, slot).Err() == nil && owns(t, c, slot) {
			owner, ownerID = c, id
		} else if other == nil {
			other, otherID = c, id
		}
	}
	if owner == nil || other == nil {
		t.Fatalf("slot %d: no owner and other node found", slot)
	}
	b.break_(t, owner, other, slot, ownerID, otherID)
	var once atomic.Bool
	mend = func() {
		if once.CompareAndSwap(false, true) {
			b.mend(t, owner, other, slot, ownerID, otherID)
		}
	}
	t.Cleanup(mend)
	return key, mend
}

// owns reports whether c's node serves slot, by its own CLUSTER SLOTS.
func owns(t *testing.T, c *redis.Client, slot int) bool {
	t.Helper()
	//lint:ignore SA1019 CLUSTER SHARDS is Redis 7's; the matrix runs Redis 6.0 too
	slots, err := c.ClusterSlots(context.Background()).Result()
	if err != nil {
		t.Fatalf("CLUSTER SLOTS on %s: %v", c.Options().Addr, err)
	}
	for _, s := range slots {
		if slot >= s.Start && slot <= s.End && len(s.Nodes) > 0 {
			return s.Nodes[0].Addr == c.Options().Addr
		}
	}
	return false
}

// TestClusterSlotMovingWaits: a decision whose slot no node serves for a
// while (MOVED back and forth past go-redis's redirects, CLUSTERDOWN) is
// sent again after a pause until the slot is served, and decided within
// its deadline; Redis ran nothing meanwhile, so it counts once.
func TestClusterSlotMovingWaits(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	limit := algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: 5, Window: time.Hour}
	for _, b := range slotBreaks {
		t.Run(b.name, func(t *testing.T) {
			client := cluster.Client(t)
			hook := new(movingHook)
			client.AddHook(hook)
			store := New(client, Options{})
			store.runner.slotRetries = 20 * time.Second // the test mends the slot
			key, mend := brokenSlot(t, cluster, client, b)
			reqs := []algorithms.Request{{Key: key, Limit: limit, Cost: 1}}
			type result struct {
				ds  []algorithms.Decision
				err error
			}
			done := make(chan result, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				ds, err := store.Allow(ctx, reqs)
				done <- result{ds, err}
			}()
			// the decision was answered "moving" twice: it waits, and was sent again
			for hook.n.Load() < 2 {
				select {
				case r := <-done:
					t.Fatalf("decided while the slot was broken: %v, %v; want a wait", r.ds, r.err)
				case <-time.After(time.Millisecond):
				}
			}
			mend()
			r := <-done
			if r.err != nil {
				t.Fatalf("after the slot was mended: %v", r.err)
			}
			if got, want := r.ds[0].Remaining, int64(4); !r.ds[0].Allowed || got != want {
				t.Errorf("decision: allowed %v, remaining %d; want allowed, %d", r.ds[0].Allowed, got, want)
			}
		})
	}
}

// TestClusterSlotMovingDeadline: a decision whose slot stays unserved
// fails with the reply it was last given, for failure_mode to decide,
// having been sent more than once, once its retry budget is spent: well
// before its deadline, which it does not wait out.
func TestClusterSlotMovingDeadline(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 5, Window: time.Hour}
	for _, b := range slotBreaks {
		t.Run(b.name, func(t *testing.T) {
			client := cluster.Client(t)
			hook := new(movingHook)
			client.AddHook(hook)
			store := New(client, Options{})
			key, _ := brokenSlot(t, cluster, client, b)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, err := store.Allow(ctx, []algorithms.Request{{Key: key, Limit: limit, Cost: 1}})
			if err == nil || !strings.Contains(err.Error(), b.want) {
				t.Fatalf("got error %v, want a %s reply", err, b.want)
			}
			if got := hook.n.Load(); got < 2 {
				t.Errorf("sent %d times, want more than once", got)
			}
			if ctx.Err() != nil {
				t.Errorf("failed at its deadline, want at its retry budget (%v)", slotRetryBudget)
			}
		})
	}
}

// TestClusterSlotMovingOthersAnswered: in a batch with a request on a
// moving slot and one on a served slot, the served one is answered while
// the moving one is still sent again, and a request that comes meanwhile
// is not held behind the retries; the moving one is decided once its slot
// is served.
func TestClusterSlotMovingOthersAnswered(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 5, Window: time.Hour}
	client := cluster.Client(t)
	store := New(client, Options{})
	store.runner.slotRetries = 20 * time.Second // the test mends the slot
	key, mend := brokenSlot(t, cluster, client, slotBreaks[0])
	served := servedKey(t, client, key)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()
	moving := &pending{mode: modeConsume, reqs: []algorithms.Request{{Key: key, Limit: limit, Cost: 1}},
		deadline: deadline, hasDeadline: true, done: make(chan struct{}, 1)}
	other := &pending{mode: modeConsume, reqs: []algorithms.Request{{Key: served, Limit: limit, Cost: 1}},
		deadline: deadline, hasDeadline: true, done: make(chan struct{}, 1)}
	b := store.batcher
	b.mu.Lock()
	b.running++ // the batch's place in flight, as do takes it
	b.mu.Unlock()
	called := make(chan struct{})
	go func() {
		defer close(called)
		b.call(ctx, moving, []*pending{moving, other})
	}()
	select {
	case <-other.done:
	case <-called:
		t.Fatal("the batch returned while its slot was broken")
	case <-time.After(10 * time.Second):
		t.Fatal("the served slot's request was not answered while the moving one was retried")
	}
	if other.err != nil || len(other.ds) != 1 || !other.ds[0].Allowed {
		t.Fatalf("served slot's request: %v, %v; want allowed", other.ds, other.err)
	}
	next, cancelNext := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelNext()
	if _, err := store.Allow(next, []algorithms.Request{{Key: served, Limit: limit, Cost: 1}}); err != nil {
		t.Fatalf("a request after the batch, while its moving slot was retried: %v", err)
	}
	select {
	case <-called:
		t.Fatal("the batch returned while its slot was broken")
	default:
	}
	mend()
	<-called
	if moving.err != nil || len(moving.ds) != 1 || !moving.ds[0].Allowed {
		t.Fatalf("moving slot's request after the mend: %v, %v; want allowed", moving.ds, moving.err)
	}
}

// servedKey is a new key whose slot is not key's.
func servedKey(t *testing.T, client *redis.ClusterClient, key string) string {
	t.Helper()
	ctx := context.Background()
	slot := client.ClusterKeySlot(ctx, key).Val()
	for i := range 100 {
		k := fmt.Sprintf("served:%d:{%d}", rand.Int64(), i)
		if client.ClusterKeySlot(ctx, k).Val() != slot {
			return k
		}
	}
	t.Fatal("no key in another slot")
	return ""
}
