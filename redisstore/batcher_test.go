package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// commandCalls is how many times Redis ran each of the commands named
// (lower case, e.g. "fcall"), from INFO commandstats.
func commandCalls(tb testing.TB, c *redis.Client, names ...string) int64 {
	tb.Helper()
	return commandStat(tb, c, "calls", names...)
}

// commandStat sums one field of INFO commandstats ("calls", "usec") over
// the commands named.
func commandStat(tb testing.TB, c *redis.Client, field string, names ...string) int64 {
	tb.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\r\n") {
		for _, name := range names {
			stats, ok := strings.CutPrefix(line, "cmdstat_"+name+":")
			if !ok {
				continue
			}
			for _, kv := range strings.Split(stats, ",") {
				if v, ok := strings.CutPrefix(kv, field+"="); ok {
					n, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						tb.Fatalf("commandstats line %q: %v", line, err)
					}
					total += n
				}
			}
		}
	}
	return total
}

// TestBatchedExactness: 3 stores (3 Caddy instances, each its own client
// and batcher) × 200 concurrent two-zone requests over 20 keys, every
// request also in one shared zone. Batching on, each key admits exactly
// its limit, the shared zone exactly its own, and a denied request consumed
// nothing: each key's remaining quota is its limit less what it admitted.
func TestBatchedExactness(t *testing.T) {
	const instances, perInstance, keys, perKey, shared = 3, 200, 20, 7, 100
	srv := redistest.Start(t)
	stores := make([]*Store, instances)
	for i := range stores {
		stores[i] = New(srv.Client(t), Options{})
	}
	for _, alg := range []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingLog, algorithms.TokenBucket} {
		t.Run(string(alg), func(t *testing.T) {
			id := rand.Int64()
			limit := algorithms.Limit{Algorithm: alg, Events: perKey, Window: time.Hour}
			global := algorithms.Request{Key: fmt.Sprintf("exact:%d:global", id), Limit: algorithms.Limit{Algorithm: alg, Events: shared, Window: time.Hour}, Cost: 1}
			reqs := func(k int) []algorithms.Request {
				return []algorithms.Request{{Key: fmt.Sprintf("exact:%d:%d", id, k), Limit: limit, Cost: 1}, global}
			}
			admitted := admitPerKey(t, stores, instances*perInstance, keys, reqs)
			var total int64
			for k, got := range admitted {
				total += got
				if got > perKey {
					t.Errorf("key %d admitted: got %d, want at most %d", k, got, perKey)
				}
				ds, err := stores[0].Peek(context.Background(), reqs(k)[:1])
				if err != nil {
					t.Fatal(err)
				}
				if got, want := ds[0].Remaining, perKey-admitted[k]; got != want {
					t.Errorf("key %d remaining: got %d, want %d (denied requests consumed)", k, got, want)
				}
			}
			// demand is 30 per key and 600 in all: the shared zone binds
			if got, want := total, int64(shared); got != want {
				t.Errorf("admitted in all: got %d, want %d", got, want)
			}
		})
	}
}

// TestOneCallDecidesMany: 32 callers in a loop share calls; Redis runs at
// most one call per four decisions (INFO commandstats).
func TestOneCallDecidesMany(t *testing.T) {
	const callers, each = 32, 200
	srv := redistest.Start(t)
	client := srv.Client(t)
	for _, tt := range []struct {
		name    string
		opts    Options
		command string
	}{
		{"functions", Options{}, "fcall"},
		{"scripts", Options{Scripts: true}, "evalsha"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if v := redistest.ServerVersion(t); !v.Functions() {
				tt.command = "evalsha" // the store falls back to it
			}
			store := New(srv.Client(t), tt.opts)
			if err := store.Warm(context.Background()); err != nil {
				t.Fatal(err)
			}
			limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1 << 40, Window: time.Hour}
			before := commandCalls(t, client, tt.command)
			var wg sync.WaitGroup
			for c := range callers {
				wg.Go(func() {
					for i := range each {
						reqs := []algorithms.Request{{Key: fmt.Sprintf("many:%d:%d", c, i%10), Limit: limit, Cost: 1}}
						ds, err := store.Allow(context.Background(), reqs)
						if err != nil || !ds[0].Allowed {
							t.Errorf("caller %d request %d: got %+v, %v, want admitted", c, i, ds, err)
							return
						}
					}
				})
			}
			wg.Wait()
			calls := commandCalls(t, client, tt.command) - before
			perDecision := float64(calls) / (callers * each)
			t.Logf("%s: %d calls for %d decisions (%.3f per decision)", tt.command, calls, callers*each, perDecision)
			if calls == 0 || perDecision > 0.25 {
				t.Errorf("%s calls per decision: got %.3f (%d calls), want in (0, 0.25]", tt.command, perDecision, calls)
			}
		})
	}
}

// TestIdleStoreSendsAtOnce: a lone request is its own call; nothing waits
// for company.
func TestIdleStoreSendsAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	store := New(client, Options{})
	if err := store.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	limit := algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 100, Window: time.Hour}
	before := commandCalls(t, client, "fcall", "evalsha", "eval")
	for i := range 20 {
		ds, err := store.Allow(context.Background(), []algorithms.Request{{Key: "idle", Limit: limit, Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ds[0].Remaining, int64(99-i); got != want {
			t.Fatalf("request %d: got remaining %d, want %d", i, got, want)
		}
	}
	if got, want := commandCalls(t, client, "fcall", "evalsha", "eval")-before, int64(20); got != want {
		t.Errorf("calls for 20 sequential requests: got %d, want %d", got, want)
	}
}

// TestCancelledCallerStopsWaiting: a caller whose context ends while its
// request waits in the queue returns at once with the context's error, and
// the store goes on deciding for the others.
func TestCancelledCallerStopsWaiting(t *testing.T) {
	srv := redistest.Start(t)
	store := New(srv.Client(t), Options{InFlight: 1})
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1 << 40, Window: time.Hour}
	reqs := []algorithms.Request{{Key: fmt.Sprint("cancel:", rand.Int64()), Limit: limit, Cost: 1}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := store.Allow(ctx, reqs); err != context.Canceled {
		t.Fatalf("cancelled caller: got %v, want %v", err, context.Canceled)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		ctx, cancel := context.WithCancel(context.Background())
		if i%2 == 1 {
			cancel() // half give up at once, some while queued
		}
		wg.Go(func() {
			defer cancel()
			_, err := store.Allow(ctx, reqs)
			if i%2 == 0 && err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("caller that did not cancel: got %v, want no error", err)
	}
	if ds, err := store.Allow(context.Background(), reqs); err != nil || !ds[0].Allowed {
		t.Errorf("after the cancellations: got %+v, %v, want admitted", ds, err)
	}
}

// admitPerKey sends calls concurrent requests, request i to store
// i % len(stores) for key i % keys, all released at once, and returns how
// many each key admitted.
func admitPerKey(t *testing.T, stores []*Store, calls, keys int, reqs func(k int) []algorithms.Request) []int64 {
	t.Helper()
	var mu sync.Mutex
	admitted := make([]int64, keys)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range calls {
		wg.Go(func() {
			<-start
			r := reqs(i % keys)
			ds, err := stores[i%len(stores)].Allow(context.Background(), r)
			if err != nil {
				t.Error(err)
				return
			}
			if algorithms.Admitted(r, ds) {
				mu.Lock()
				admitted[i%keys]++
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	return admitted
}

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

// signalSends wraps b.send to signal each call it is handed, but when a
// signal is already waiting; waitSent waits for one.
func signalSends(b *batcher) <-chan struct{} {
	sent, send := make(chan struct{}, 1), b.send
	b.send = func(ctx context.Context, batch []*pending, e *early) {
		select {
		case sent <- struct{}{}:
		default:
		}
		send(ctx, batch, e)
	}
	return sent
}

// waitSent waits for a call to be handed to send (a signal on sent): a
// call's place in flight is taken before its sender yields and gathers,
// so only then does every later request queue.
func waitSent(t *testing.T, sent <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-sent:
	case <-time.After(10 * time.Second):
		t.Fatalf("batcher: %s never sent", what)
	}
}

// TestPanickingSendReleasesBatcher: a send that panics fails its batch
// with an error and leaves the batcher free: later decisions do not wait
// out their timeouts behind it.
func TestPanickingSendReleasesBatcher(t *testing.T) {
	b := &batcher{inFlight: 1}
	b.send = func(_ context.Context, batch []*pending, _ *early) {
		for _, p := range batch {
			if p.mode == "boom" {
				panic("send exploded")
			}
			p.ds = []algorithms.Decision{{Allowed: true}}
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

// senderKey marks a caller's context with its name, so that a send can
// tell whose context its call runs under.
type senderKey struct{}

// TestLatestDeadlineSendsBatch: of the requests queued behind a call, the
// one that may wait longest (no deadline, else the latest; the first of
// equals) sends the next batch, on its own context bounded by its own
// deadline, and the batch keeps the queue's order.
func TestLatestDeadlineSendsBatch(t *testing.T) {
	const none = time.Duration(0)
	for _, tt := range []struct {
		name      string
		deadlines []time.Duration // from now; none: no deadline
		sender    int
	}{
		{"latest in the middle", []time.Duration{time.Hour, 3 * time.Hour, 2 * time.Hour}, 1},
		{"latest last", []time.Duration{time.Hour, 2 * time.Hour, 3 * time.Hour}, 2},
		{"no deadline", []time.Duration{time.Hour, none, 2 * time.Hour}, 1},
		{"first of equals", []time.Duration{none, time.Hour, none}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			release := make(chan struct{})
			type sent struct {
				sender   any
				deadline time.Time
				order    []string
			}
			calls := make(chan sent, 1)
			b := &batcher{inFlight: 1}
			b.send = func(ctx context.Context, batch []*pending, _ *early) {
				if batch[0].mode == "block" {
					<-release
					return
				}
				s := sent{sender: ctx.Value(senderKey{})}
				s.deadline, _ = ctx.Deadline()
				for _, p := range batch {
					s.order = append(s.order, p.mode)
				}
				calls <- s
			}
			blocking := signalSends(b)
			go func() { _ = b.do(context.Background(), &pending{mode: "block"}) }()
			waitSent(t, blocking, "first call")
			var wg sync.WaitGroup
			deadlines := make([]time.Time, len(tt.deadlines))
			for i, d := range tt.deadlines {
				ctx := context.WithValue(context.Background(), senderKey{}, i)
				if d != none {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, d)
					defer cancel()
					deadlines[i], _ = ctx.Deadline()
				}
				wg.Go(func() { _ = b.do(ctx, &pending{mode: strconv.Itoa(i)}) })
				waitBatcher(t, b, fmt.Sprintf("request %d queued", i), func(b *batcher) bool { return len(b.queue) == i+1 })
			}
			close(release)
			got := <-calls
			wg.Wait()
			if got.sender != tt.sender {
				t.Errorf("sender: got request %v, want %d", got.sender, tt.sender)
			}
			if want := deadlines[tt.sender]; !got.deadline.Equal(want) {
				t.Errorf("call's deadline: got %v, want %v (the sender's)", got.deadline, want)
			}
			if got, want := strings.Join(got.order, ","), "0,1,2"; got != want {
				t.Errorf("batch order: got %s, want %s", got, want)
			}
		})
	}
}

// TestAbandonedPendingNotReused: a request whose caller gives up while it
// is in another's call is not given out again (that call still writes it);
// one that got its answer is.
func TestAbandonedPendingNotReused(t *testing.T) {
	b := &batcher{inFlight: 1}
	hold, inCall := make(chan struct{}), make(chan struct{}, 2)
	b.send = func(_ context.Context, batch []*pending, _ *early) {
		inCall <- struct{}{}
		<-hold
		for _, p := range batch {
			p.ds = []algorithms.Decision{{Allowed: true}}
		}
	}
	go func() { _ = b.do(context.Background(), b.get()) }()
	<-inCall // the first call is out: the next two queue
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	gaveUp, p := make(chan error), b.get()
	go func() { gaveUp <- b.do(ctx, p) }()
	waitBatcher(t, b, "p queued", func(b *batcher) bool { return len(b.queue) == 1 })
	answered, q := make(chan error), b.get()
	go func() { answered <- b.do(context.Background(), q) }() // no deadline: q sends [p, q]
	waitBatcher(t, b, "q queued", func(b *batcher) bool { return len(b.queue) == 2 })
	hold <- struct{}{} // the first call returns; [p, q] goes out
	<-inCall
	cancel()
	if err := <-gaveUp; err != context.Canceled {
		t.Fatalf("p: got %v, want %v", err, context.Canceled)
	}
	b.release(p)
	close(hold)
	if err := <-answered; err != nil {
		t.Fatalf("q: got %v, want decided", err)
	}
	if !q.ds[0].Allowed {
		t.Errorf("q: got %+v, want its decision", q.ds)
	}
	b.release(q)
	for range 4 {
		if b.get() == p {
			t.Fatal("get: got the abandoned pending, which its call may still write")
		}
	}
}

// TestDecisionsBeforeSettlements: a decision queued behind settlements
// (give-backs of leases ending together, refunds) goes out in the next
// call before them, so a request never waits on give-backs.
func TestDecisionsBeforeSettlements(t *testing.T) {
	release := make(chan struct{})
	calls := make(chan string, 4)
	b := &batcher{inFlight: 1}
	b.send = func(_ context.Context, batch []*pending, _ *early) {
		if batch[0].mode == "block" {
			<-release
			return
		}
		var order []string
		for _, p := range batch {
			order = append(order, p.mode)
		}
		calls <- strings.Join(order, ",")
	}
	blocking := signalSends(b)
	go func() { _ = b.do(context.Background(), &pending{mode: "block"}) }()
	waitSent(t, blocking, "first call")
	var wg sync.WaitGroup
	queue := []*pending{
		{mode: "settle1", ss: make([]algorithms.Settlement, maxBatchKeys)},
		{mode: "settle2", ss: make([]algorithms.Settlement, 1)},
		{mode: "decide", reqs: make([]algorithms.Request, 1)},
	}
	for i, p := range queue {
		wg.Go(func() { _ = b.do(context.Background(), p) })
		waitBatcher(t, b, fmt.Sprintf("request %d queued", i), func(b *batcher) bool { return len(b.queue) == i+1 })
	}
	close(release)
	wg.Wait()
	close(calls)
	var got []string
	for c := range calls {
		got = append(got, c)
	}
	if want := []string{"decide", "settle1", "settle2"}; !slices.Equal(got, want) { // settle1 fills a call
		t.Errorf("calls: got %q, want the decision first (%q)", got, want)
	}
}

// TestSettleInBoundedCalls: many settlements at once (the give-backs of
// leases ending together) go in calls of at most maxBatchKeys, and all
// apply.
func TestSettleInBoundedCalls(t *testing.T) {
	client := redistest.Start(t).Client(t)
	s := New(client, Options{})
	ctx := context.Background()
	l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 10, Window: time.Hour}
	const n = 3*maxBatchKeys + 1
	var ss []algorithms.Settlement
	for i := range n {
		key := fmt.Sprintf("chunk:{%d}", i)
		ds, err := s.AllowAt(ctx, t0, []algorithms.Request{{Key: key, Limit: l, Cost: 2}})
		if err != nil || !ds[0].Allowed {
			t.Fatalf("admitting %s: %+v, %v", key, ds, err)
		}
		ss = append(ss, algorithms.Settlement{Key: key, Limit: l, At: ds[0].At, Delta: -1})
	}
	before := redistest.ScriptCalls(t, client)
	if err := s.SettleAt(ctx, t0, ss); err != nil {
		t.Fatal(err)
	}
	if got, want := redistest.ScriptCalls(t, client)-before, int64(4); got != want {
		t.Errorf("calls for %d settlements: got %d, want %d", n, got, want)
	}
	for _, i := range []int{0, n - 1} {
		ds, err := s.AllowAt(ctx, t0, []algorithms.Request{{Key: fmt.Sprintf("chunk:{%d}", i), Limit: l, Cost: 1}})
		if err != nil || ds[0].Remaining != 10-1-1 {
			t.Errorf("key %d after its refund: %+v, %v; want remaining 8", i, ds, err)
		}
	}
}
