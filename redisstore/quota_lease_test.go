package redisstore

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/leasetwin"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
	"github.com/sluicehq/caddy-sluice/quota"
)

// leaseLimits are a limit of 100 per 10 s of each algorithm that leases
// (a token bucket's per hour: nothing drains within the tests' steps).
func leaseLimits() []algorithms.Limit {
	var ls []algorithms.Limit
	for _, spec := range algorithms.Specs() {
		if spec.Leases {
			l := algorithms.Limit{Algorithm: spec.Name, Events: 100, Window: 10 * time.Second}
			if spec.Burst {
				l.Window = time.Hour
			}
			ls = append(ls, l)
		}
	}
	return ls
}

// leaseReq is a request of cost 1 on key asking units for holder.
func leaseReq(key string, l algorithms.Limit, units int64, holder string) algorithms.Request {
	return algorithms.Request{Key: key, Limit: l, Cost: 1,
		Quota: algorithms.QuotaAsk{For: 250 * time.Millisecond, Units: units, Holder: holder}}
}

// allowAt decides one request at now, failing t on an error.
func allowAt(t *testing.T, s *Store, now time.Time, reqs ...algorithms.Request) []algorithms.Decision {
	t.Helper()
	ds, err := s.AllowAt(context.Background(), now, reqs)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestQuotaGrant: a grant counts its units at once (the next request sees
// them used, and the key's units out), ends as its algorithm's rule says,
// is shared among the holders, and is refused when shorter than asked.
func TestQuotaGrant(t *testing.T) {
	s := New(redistest.Start(t).Client(t), Options{})
	for _, l := range leaseLimits() {
		t.Run(string(l.Algorithm), func(t *testing.T) {
			key := fmt.Sprintf("grant:%s:{%d}", l.Algorithm, rand.Int64())
			now := t0.Add(1400 * time.Millisecond) // a sliding_window slot (500 ms) ends at 1.5 s
			d := allowAt(t, s, now, leaseReq(key, l, 30, "a"))[0]
			if !d.Allowed || d.Quota.Units != 30 || d.Remaining != 69 || d.Quota.Out != 30 {
				t.Fatalf("grant: %+v, want 30 units granted, remaining 69, 30 out", d)
			}
			wantEnd := now.Add(250 * time.Millisecond)
			switch l.Algorithm {
			case algorithms.SlidingWindow:
				wantEnd = t0.Add(1500 * time.Millisecond)
			case algorithms.SlidingLog: // a fiftieth of the window
				wantEnd = now.Add(l.Window / algorithms.SlidingLogLeaseParts)
			}
			if d.Quota.End != wantEnd.UnixMicro() {
				t.Errorf("end %v after the grant, want %v", time.Duration(d.Quota.End-now.UnixMicro())*time.Microsecond, wantEnd.Sub(now))
			}
			cold := allowAt(t, s, now.Add(time.Millisecond), leaseReq(key, l, 0, "c"))[0]
			if !cold.Allowed || cold.Remaining != 68 || cold.Quota.Units != 0 || cold.Quota.Out != 30 {
				t.Errorf("a request without an ask: %+v, want remaining 68, 30 out", cold)
			}
			// a second holder: what remains (68 − 1) shared by two, halved
			second := allowAt(t, s, now.Add(2*time.Millisecond), leaseReq(key, l, 1000, "b"))[0]
			if want := int64((68 - 1) / 4); second.Quota.Units != want {
				t.Errorf("second holder's grant: %d units, want %d", second.Quota.Units, want)
			}
			short := leaseReq(key, l, 10, "a")
			short.Quota.Min = time.Second
			if d := allowAt(t, s, now.Add(3*time.Millisecond), short)[0]; !d.Allowed || d.Quota.Units != 0 {
				t.Errorf("a lease shorter than its min: %+v, want admitted without a grant", d)
			}
		})
	}
}

// TestQuotaGiveBack: unused units go back once, and only within their
// generation: not twice, not after a reset, not after the give-back's
// time (token_bucket: its lease's end).
func TestQuotaGiveBack(t *testing.T) {
	s := New(redistest.Start(t).Client(t), Options{})
	ctx := context.Background()
	for _, l := range leaseLimits() {
		t.Run(string(l.Algorithm), func(t *testing.T) {
			key := fmt.Sprintf("giveback:%s:{%d}", l.Algorithm, rand.Int64())
			now := t0.Add(time.Second)
			req := leaseReq(key, l, 30, "a")
			d := allowAt(t, s, now, req)[0]
			if d.Quota.Units != 30 {
				t.Fatalf("grant: %+v", d)
			}
			gb := algorithms.GiveBackOf(req, d, 20)
			at := now.Add(100 * time.Millisecond)
			if err := s.GiveBackAt(ctx, at, []algorithms.GiveBack{gb}); err != nil {
				t.Fatal(err)
			}
			peek := leaseReq(key, l, 0, "a")
			if got := allowAt(t, s, at, peek)[0]; got.Remaining != 69+20-1 || got.Quota.Out != 10 {
				t.Errorf("after giving back 20: %+v, want remaining %d, 10 out", got, 69+20-1)
			}
			if err := s.GiveBackAt(ctx, at, []algorithms.GiveBack{gb}); err != nil { // sent twice
				t.Fatal(err)
			}
			if got := allowAt(t, s, at, peek)[0]; got.Remaining != 69+20-2 {
				t.Errorf("after the same give-back again: remaining %d, want %d (applied once)", got.Remaining, 69+20-2)
			}
			// a lease of a generation a reset ended
			d = allowAt(t, s, at, leaseReq(key, l, 30, "a"))[0]
			if d.Quota.Units == 0 {
				t.Fatalf("second grant: %+v", d)
			}
			if err := s.Reset(ctx, key); err != nil {
				t.Fatal(err)
			}
			fresh := allowAt(t, s, at, peek)[0] // 99 left
			if err := s.GiveBackAt(ctx, at, []algorithms.GiveBack{algorithms.GiveBackOf(req, d, d.Quota.Units)}); err != nil {
				t.Fatal(err)
			}
			if got := allowAt(t, s, at, peek)[0]; got.Remaining != fresh.Remaining-1 {
				t.Errorf("a give-back from before the reset: remaining %d, want %d (nothing given back)", got.Remaining, fresh.Remaining-1)
			}
			// too late: past the lease's end + quota_lease + the grace (token_bucket: past its end)
			d = allowAt(t, s, at, leaseReq(key, l, 30, "a"))[0]
			late := time.UnixMicro(d.Quota.End).Add(req.Quota.For + algorithms.QuotaGiveBackGrace)
			if l.Algorithm == algorithms.TokenBucket {
				late = time.UnixMicro(d.Quota.End)
			}
			before := allowAt(t, s, late, peek)[0]
			if err := s.GiveBackAt(ctx, late, []algorithms.GiveBack{algorithms.GiveBackOf(req, d, d.Quota.Units)}); err != nil {
				t.Fatal(err)
			}
			if got := allowAt(t, s, late, peek)[0]; got.Remaining != before.Remaining-1 {
				t.Errorf("a give-back too late: remaining %d, want %d (nothing given back)", got.Remaining, before.Remaining-1)
			}
		})
	}
}

// TestQuotaGiveBackAnyOrder: a holder's give-backs of two grants land in
// either order (they travel in separate calls), each once. token_bucket
// takes back only its latest grant (TestQuotaGiveBack).
func TestQuotaGiveBackAnyOrder(t *testing.T) {
	s := New(redistest.Start(t).Client(t), Options{})
	ctx := context.Background()
	for _, l := range leaseLimits() {
		if l.Algorithm == algorithms.TokenBucket {
			continue
		}
		t.Run(string(l.Algorithm), func(t *testing.T) {
			key := fmt.Sprintf("anyorder:%s:{%d}", l.Algorithm, rand.Int64())
			now := t0.Add(time.Second)
			req := leaseReq(key, l, 20, "a")
			first := allowAt(t, s, now, req)[0]
			second := allowAt(t, s, now.Add(time.Millisecond), req)[0]
			if first.Quota.Units != 20 || second.Quota.Units != 20 || second.Remaining != 58 {
				t.Fatalf("grants %+v and %+v, want 20 units each, 58 left", first, second)
			}
			earlier := algorithms.GiveBackOf(req, first, 10)
			later := algorithms.GiveBackOf(req, second, 15)
			at := now.Add(100 * time.Millisecond)
			for _, gb := range []algorithms.GiveBack{later, earlier, earlier, later} { // the second of each: sent twice
				if err := s.GiveBackAt(ctx, at, []algorithms.GiveBack{gb}); err != nil {
					t.Fatal(err)
				}
			}
			if got := allowAt(t, s, at, leaseReq(key, l, 0, "a"))[0]; got.Remaining != 58+25-1 || got.Quota.Out != 15 {
				t.Errorf("after giving back 15 of the later grant, then 10 of the earlier: remaining %d, %d out; want %d and 15",
					got.Remaining, got.Quota.Out, 58+25-1)
			}
		})
	}
}

// TestQuotaGiveBackAfterUnitsEnded: a grant made once every lease had
// ended starts the units out afresh, so a give-back of an earlier grant
// that lands after it returns its units to the state but takes none off
// the later grant's units out.
func TestQuotaGiveBackAfterUnitsEnded(t *testing.T) {
	s := New(redistest.Start(t).Client(t), Options{})
	ctx := context.Background()
	for _, l := range leaseLimits() {
		if l.Algorithm == algorithms.TokenBucket { // its give-back counts only before its lease's end
			continue
		}
		t.Run(string(l.Algorithm), func(t *testing.T) {
			key := fmt.Sprintf("unitsended:%s:{%d}", l.Algorithm, rand.Int64())
			now := t0.Add(time.Second)
			req := leaseReq(key, l, 20, "a")
			first := allowAt(t, s, now, req)[0]
			second := allowAt(t, s, now.Add(300*time.Millisecond), req)[0] // first's lease ended at 250ms
			if first.Quota.Units != 20 || second.Quota.Units != 20 || second.Quota.Out != 20 {
				t.Fatalf("grants %+v and %+v, want 20 units each, 20 out after the second", first, second)
			}
			at := now.Add(310 * time.Millisecond) // before first's end + quota_lease
			if err := s.GiveBackAt(ctx, at, []algorithms.GiveBack{algorithms.GiveBackOf(req, first, 10)}); err != nil {
				t.Fatal(err)
			}
			if got := allowAt(t, s, at, leaseReq(key, l, 0, "a"))[0]; got.Remaining != second.Remaining+10-1 || got.Quota.Out != 20 {
				t.Errorf("after giving back 10 of the first grant: remaining %d, %d out; want %d and 20 (the second's)",
					got.Remaining, got.Quota.Out, second.Remaining+10-1)
			}
		})
	}
}

// TestQuotaGiveBacksBounded: a holder's grants given back are kept until
// their give-back time is over, at most 64 of them: a give-back past that
// is refused, so that one's work in Redis stays bounded.
func TestQuotaGiveBacksBounded(t *testing.T) {
	s := New(redistest.Start(t).Client(t), Options{})
	ctx := context.Background()
	l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 100_000, Window: time.Hour}
	req := leaseReq(fmt.Sprintf("bounded:{%d}", rand.Int64()), l, 10, "a")
	now := t0.Add(time.Second)
	var gbs []algorithms.GiveBack
	for i := range 65 {
		d := allowAt(t, s, now.Add(time.Duration(i)*time.Microsecond), req)[0]
		gbs = append(gbs, algorithms.GiveBackOf(req, d, 5))
	}
	at := now.Add(time.Millisecond)
	remaining := func() int64 { return allowAt(t, s, at, leaseReq(req.Key, l, 0, "a"))[0].Remaining + 1 }
	before := remaining()
	if err := s.GiveBackAt(ctx, at, gbs[:64]); err != nil {
		t.Fatal(err)
	}
	after64 := remaining()
	if err := s.GiveBackAt(ctx, at, gbs[64:]); err != nil {
		t.Fatal(err)
	}
	if got := remaining(); after64 != before-1+64*5 || got != after64-1 {
		t.Errorf("remaining %d, %d after 64 give-backs of 5, %d after the 65th; want %d and the 65th refused",
			before, after64, got, before-1+64*5)
	}
}

// TestQuotaAllOrNothing: a request whose zones do not all ask leases
// nothing in any of them.
func TestQuotaAllOrNothing(t *testing.T) {
	s := New(redistest.Start(t).Client(t), Options{})
	l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 100, Window: 10 * time.Second}
	id := rand.Int64()
	asks := leaseReq(fmt.Sprintf("aon:a:{%d}", id), l, 30, "a")
	silent := leaseReq(fmt.Sprintf("aon:b:{%d}", id), l, 0, "a")
	ds := allowAt(t, s, t0, asks, silent)
	if ds[0].Quota.Units != 0 || ds[1].Quota.Units != 0 || ds[0].Remaining != 99 {
		t.Errorf("one zone of two asking: %+v, want no grant", ds)
	}
	silent.Quota.Units = 30
	ds = allowAt(t, s, t0, asks, silent)
	if ds[0].Quota.Units == 0 || ds[1].Quota.Units == 0 {
		t.Errorf("both asking: %+v, want both granted", ds)
	}
}

// TestQuotaTokenBucketTakenAtEnd: a token bucket's leased units are
// taken as if at the lease's end (GCRA: TAT' = max(TAT, end) + units ×
// interval): the level is at least what drains until the end, plus the
// units; after the end it drains as before.
func TestQuotaTokenBucketTakenAtEnd(t *testing.T) {
	s := New(redistest.Start(t).Client(t), Options{})
	l := algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 100, Window: 10 * time.Second, Burst: 40} // 10 a second, leases of a slot (500ms) at most
	key := fmt.Sprintf("tbend:{%d}", rand.Int64())
	// 39 left, shared by two: 19 granted, until 250 ms, when 2.5 have
	// drained: the level is max(1, 2.5) + 19 = 21.5, 22 used
	d := allowAt(t, s, t0, leaseReq(key, l, 30, "a"))[0]
	if d.Quota.Units != 19 || d.Remaining != 40-22 {
		t.Fatalf("grant: %+v, want 19 units, %d remaining", d, 40-22)
	}
	mid := t0.Add(200 * time.Millisecond) // 2 drained: 19.5, 20 used
	if got := allowAt(t, s, mid, leaseReq(key, l, 0, "a"))[0]; got.Remaining != 40-20-1 {
		t.Errorf("before the lease's end: remaining %d, want %d", got.Remaining, 40-20-1)
	}
	after := t0.Add(750 * time.Millisecond) // 20.5 at 200 ms, 5.5 drained since
	if got := allowAt(t, s, after, leaseReq(key, l, 0, "a"))[0]; got.Remaining != 40-15-1 {
		t.Errorf("after the lease's end: remaining %d, want %d", got.Remaining, 40-15-1)
	}
	// a small bucket at a high rate: a slot (1 s / 20) is shorter than what
	// the other 6 drain in (60 ms): 4 units until 50 ms, when 5 have
	// drained: max(1, 5) + 4 = 9 used
	short := algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 100, Window: time.Second, Burst: 10}
	d = allowAt(t, s, t0, leaseReq(fmt.Sprintf("tbshort:{%d}", rand.Int64()), short, 4, "a"))[0]
	if want := t0.Add(50 * time.Millisecond).UnixMicro(); d.Quota.Units != 4 || d.Quota.End != want || d.Remaining != 1 {
		t.Errorf("a small bucket at a high rate: %+v, want 4 units until 50 ms, 1 remaining", d)
	}
}

// TestQuotaBanSparesUnitsOut: a ban zone trips only when the request
// would be denied with the units out counted as free; then it announces
// the key so holders drop their leases.
func TestQuotaBanSparesUnitsOut(t *testing.T) {
	srv := redistest.Start(t)
	s := New(srv.Client(t), Options{})
	l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 10, Window: 10 * time.Second}
	key := fmt.Sprintf("qban:{%d}", rand.Int64())
	req := leaseReq(key, l, 4, "a")
	req.BanSeconds = 60
	d := allowAt(t, s, t0, req)[0] // 1 + 4 leased
	if d.Quota.Units != 4 {
		t.Fatalf("grant: %+v", d)
	}
	req.Quota.Units = 0
	for range 5 {
		allowAt(t, s, t0, req)
	}
	req.Cost = 3 // 0 left, 4 out: 4 ≥ 3 would pass with them free
	if d := allowAt(t, s, t0, req)[0]; d.Allowed || d.Banned {
		t.Errorf("denied with units out that would admit it: %+v, want denied, not banned", d)
	}
	req.Cost = 5 // more than the units out: a trip
	if d := allowAt(t, s, t0, req)[0]; d.Allowed || !d.BanStarted {
		t.Errorf("denied even with the units out free: %+v, want the ban started", d)
	}
}

// TestQuotaBanAnnouncedOnResetChannel: a ban tripped on a key with
// leases out is announced on the reset channel, so that their holders
// drop them: by a zone that leases, and by one that does not (quota_lease
// off, a zone of the same name in another handler); a ban on a key
// without lease bookkeeping is not.
func TestQuotaBanAnnouncedOnResetChannel(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	s := New(client, Options{})
	ctx := context.Background()
	sub := client.Subscribe(ctx, ResetChannel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 10, Window: 10 * time.Second}
	for _, tt := range []struct {
		name             string
		leased, unleased bool // a grant first; the trip without leasing
		announced        bool
	}{
		{"by a zone that leases", true, false, true},
		{"by a zone that does not, on a key with leases out", true, true, true},
		{"on a key without leases", false, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := fmt.Sprintf("qbanpub:{%d}", rand.Int64())
			req := leaseReq(key, l, 4, "a")
			req.BanSeconds = 60
			if tt.leased { // 1, and 4 out
				if d := allowAt(t, s, t0, req)[0]; d.Quota.Units != 4 {
					t.Fatalf("grant: %+v", d)
				}
			} else {
				allowAt(t, s, t0, algorithms.Request{Key: key, Limit: l, Cost: 1})
			}
			req.Quota.Units = 0
			if tt.unleased {
				req.Quota = algorithms.QuotaAsk{}
			}
			req.Cost = 10 // over what is left, even with the units out free
			if d := allowAt(t, s, t0, req)[0]; !d.BanStarted {
				t.Fatalf("the trip: %+v, want the ban started", d)
			}
			const mark = "mark" // published after: the channel keeps the order
			if err := client.Publish(ctx, ResetChannel, mark).Err(); err != nil {
				t.Fatal(err)
			}
			m, err := sub.ReceiveMessage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]string{true: key, false: mark}[tt.announced]; m.Payload != want {
				t.Errorf("first message after the trip: %q, want %q", m.Payload, want)
			}
			if m.Payload != mark {
				if m, err = sub.ReceiveMessage(ctx); err != nil || m.Payload != mark {
					t.Fatalf("then: %v %v, want %q", m, err, mark)
				}
			}
		})
	}
}

// TestQuotaMemoryMatchesRedis: the memory store's grants, give-backs,
// resets and overrides set, ended and cleared (its Go twins) decide as
// the Lua does, step by step
// on random leasing traffic from three holders: every decision, grant
// included, is the same.
func TestQuotaMemoryMatchesRedis(t *testing.T) {
	srv := redistest.Start(t)
	redisStore := New(srv.Client(t), Options{})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	limits := append(leaseLimits(),
		algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: 50, Window: time.Second},              // leases of a slot (50ms)
		algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 100, Window: time.Second, Burst: 10}, // small bucket, high rate
		algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 30, Window: 2 * time.Second},
	)
	for _, tt := range limitCases(limits) {
		l, overrides := tt.l, tt.overrides
		t.Run(fmt.Sprintf("%s/%d/%v/overrides=%v", l.Algorithm, l.Capacity(), l.Window, overrides), func(t *testing.T) {
			memory := leasetwin.NewMemoryStore()
			prefix := fmt.Sprintf("qdiff:%d:", rng.Int64())
			now := t0.Add(time.Duration(rng.Int64N(int64(time.Minute))))
			type held struct {
				req        algorithms.Request
				redis, mem algorithms.Decision // the grant as each store made it
			}
			var grants []held
			// a generation is opaque (the Redis store's start at a clock's
			// µs): the two agree when they name the same grants' generations
			redisGens, memGens := map[int64]int64{}, map[int64]int64{}
			for i := range 400 {
				// steps of a few ms: the run (about 1.2 s) stays within a
				// lease's bookkeeping's life (its end + quota_lease + 1 s),
				// which Redis expires on its own clock, not the test's
				now = now.Add(time.Duration(rng.Int64N(int64(6 * time.Millisecond))))
				key := prefix + fmt.Sprint(rng.IntN(2))
				switch op := rng.IntN(20); {
				case op == 0: // a reset
					memory.ResetAt(now, key)
					if err := redisStore.Reset(ctx, key); err != nil {
						t.Fatal(err)
					}
					continue
				case op == 2 && overrides: // a key's limit set, for good or for a moment
					// a rate no lower than the zone's: a state outlives the
					// time it drains in at the rate it was written at (its
					// expiry), which Redis counts on its own clock, not the
					// test's
					o := algorithms.Override{Events: int32(l.Events + rng.Int64N(l.Events+1))}
					if l.Algorithm == algorithms.TokenBucket {
						o.Burst = int32(1 + rng.Int64N(2*l.Capacity()))
					}
					ttl := time.Duration(rng.Int64N(2)) * time.Duration(1+rng.Int64N(int64(50*time.Millisecond)))
					if err := memory.SetOverrideAt(now, key, o, ttl); err != nil {
						t.Fatal(err)
					}
					if err := redisStore.SetOverrideAt(ctx, now, key, o, ttl); err != nil {
						t.Fatal(err)
					}
					continue
				case op == 3 && overrides:
					memory.ClearOverrideAt(now, key)
					if err := redisStore.ClearOverride(ctx, key); err != nil {
						t.Fatal(err)
					}
					continue
				case op == 1 && len(grants) > 0: // a give-back, perhaps sent twice or late
					g := grants[rng.IntN(len(grants))]
					unused := 1 + rng.Int64N(g.redis.Quota.Units)
					memory.GiveBackAt(now, []algorithms.GiveBack{algorithms.GiveBackOf(g.req, g.mem, unused)})
					if err := redisStore.GiveBackAt(ctx, now, []algorithms.GiveBack{algorithms.GiveBackOf(g.req, g.redis, unused)}); err != nil {
						t.Fatal(err)
					}
					continue
				}
				req := leaseReq(key, l, rng.Int64N(3)*rng.Int64N(20), fmt.Sprint("h", rng.IntN(3)))
				req.Cost = 1 + rng.Int64N(2)
				req.Overrides = overrides
				want := memory.AllowAt(now, []algorithms.Request{req})
				got := allowAt(t, redisStore, now, req)
				if want[0].At == 0 { // a cost above the override in force: the memory store answers it before its state
					continue
				}
				g, w := got[0], want[0]
				g.Quota.Generation, w.Quota.Generation = ordinal(redisGens, g.Quota.Generation), ordinal(memGens, w.Quota.Generation)
				if g != w {
					t.Fatalf("step %d (%s, cost %d, ask %d, holder %s): redis %+v, memory %+v", i, key, req.Cost, req.Quota.Units, req.Quota.Holder, got[0], want[0])
				}
				if got[0].Quota.Units > 0 {
					grants = append(grants, held{req, got[0], want[0]})
				}
			}
			if len(grants) == 0 {
				t.Error("no grant in 400 steps: the test tests nothing")
			}
		})
	}
}

// limitCase is a limit, with or without overrides.
type limitCase struct {
	l         algorithms.Limit
	overrides bool
}

// limitCases are limits, each without and with overrides.
func limitCases(limits []algorithms.Limit) []limitCase {
	var cs []limitCase
	for _, l := range limits {
		cs = append(cs, limitCase{l, false}, limitCase{l, true})
	}
	return cs
}

// ordinal is generation v's place among those seen in seen (1, 2, …; 0
// stays 0), for comparing two stores' opaque generations.
func ordinal(seen map[int64]int64, v int64) int64 {
	if v == 0 {
		return 0
	}
	if _, ok := seen[v]; !ok {
		seen[v] = int64(len(seen)) + 1
	}
	return seen[v]
}

// settlingOverrider is a settling store whose overrides a test sets.
type settlingOverrider interface {
	settlingStore
	SetOverrideAt(ctx context.Context, now time.Time, key string, o algorithms.Override, ttl time.Duration) error
}

// settlingOverrides is settlingStores, whose overrides a test sets.
func settlingOverrides(t *testing.T) map[string]settlingOverrider {
	t.Helper()
	out := map[string]settlingOverrider{}
	for name, s := range settlingStores(t) {
		out[name] = s.(settlingOverrider)
	}
	return out
}

// TestQuotaGiveBackUnderOverride: a lease granted under an override gives
// its units back under that override, not the zone's own limit: the
// window keeps every unit admitted in it. (Given back under the zone's
// limit of 10, a fixed window's count of 3,101 was cut to 20: the fleet
// admitted twice its override.)
func TestQuotaGiveBackUnderOverride(t *testing.T) {
	ctx := context.Background()
	for name, store := range settlingOverrides(t) {
		for _, l := range leaseLimits() {
			t.Run(name+"/"+string(l.Algorithm), func(t *testing.T) {
				l.Events = 10
				key := fmt.Sprintf("gbover:%s:{%d}", l.Algorithm, rand.Int64())
				if err := store.SetOverrideAt(ctx, t0, key, algorithms.Override{Events: 5000}, 0); err != nil {
					t.Fatal(err)
				}
				for range 3 {
					r := algorithms.Request{Key: key, Limit: l, Cost: 1000, Overrides: true}
					if ds, err := store.AllowAt(ctx, t0, []algorithms.Request{r}); err != nil || !ds[0].Allowed {
						t.Fatalf("admitting 1000 under the override: %+v, %v", ds, err)
					}
				}
				req := leaseReq(key, l, 100, "a")
				req.Overrides = true
				ds, err := store.AllowAt(ctx, t0, []algorithms.Request{req})
				if err != nil || !ds[0].Allowed || ds[0].Quota.Units != 100 {
					t.Fatalf("a grant under the override: %+v, %v; want 100 units", ds, err)
				}
				if err := store.GiveBackAt(ctx, t0, []algorithms.GiveBack{algorithms.GiveBackOf(req, ds[0], 100)}); err != nil {
					t.Fatal(err)
				}
				probe := algorithms.Request{Key: key, Limit: l, Cost: 1, Overrides: true}
				ds, err = store.AllowAt(ctx, t0, []algorithms.Request{probe})
				if err != nil {
					t.Fatal(err)
				}
				if got, want := ds[0].Remaining, int64(5000-3000-1-1); got != want {
					t.Errorf("remaining after the give-back: got %d, want %d", got, want)
				}
			})
		}
	}
}

// TestQuotaLeaseEndsWithOverride: a lease granted under an override that
// expires ends no later than the override (else its holder admits by the
// expired limit until the lease's own end).
func TestQuotaLeaseEndsWithOverride(t *testing.T) {
	ctx := context.Background()
	for name, store := range settlingOverrides(t) {
		for _, l := range leaseLimits() {
			t.Run(name+"/"+string(l.Algorithm), func(t *testing.T) {
				l.Events = 10
				key := fmt.Sprintf("endover:%s:{%d}", l.Algorithm, rand.Int64())
				now := t0.Add(time.Second)
				ends := now.Add(100 * time.Millisecond)
				if err := store.SetOverrideAt(ctx, now, key, algorithms.Override{Events: 5000}, ends.Sub(now)); err != nil {
					t.Fatal(err)
				}
				req := leaseReq(key, l, 100, "a")
				req.Overrides = true
				ds, err := store.AllowAt(ctx, now, []algorithms.Request{req})
				if err != nil || !ds[0].Allowed || ds[0].Quota.Units == 0 {
					t.Fatalf("a grant under the override: %+v, %v", ds, err)
				}
				if got := ds[0].Quota.End; got > ends.UnixMicro() {
					t.Errorf("the lease ends %v after the override", time.Duration(got-ends.UnixMicro())*time.Microsecond)
				}
			})
		}
	}
}

// TestQuotaGiveBackAfterFlush: once Redis lost a key's bookkeeping
// (FLUSHALL, a restart without persistence), a give-back of a lease
// granted before does nothing, even after a new grant on the key.
func TestQuotaGiveBackAfterFlush(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	s := New(client, Options{})
	ctx := context.Background()
	for _, l := range leaseLimits() {
		t.Run(string(l.Algorithm), func(t *testing.T) {
			key := fmt.Sprintf("flush:%s:{%d}", l.Algorithm, rand.Int64())
			req := leaseReq(key, l, 30, "a")
			old := allowAt(t, s, t0, req)[0]
			if old.Quota.Units != 30 {
				t.Fatalf("first grant: %+v, want 30 units", old)
			}
			if err := client.FlushAll(ctx).Err(); err != nil { // this test's own server
				t.Fatal(err)
			}
			now := t0.Add(time.Millisecond)
			fresh := allowAt(t, s, now, req)[0]
			if fresh.Quota.Units != 30 || fresh.Remaining != 69 {
				t.Fatalf("a grant after the flush: %+v, want 30 units, remaining 69", fresh)
			}
			if err := s.GiveBackAt(ctx, now, []algorithms.GiveBack{algorithms.GiveBackOf(req, old, 30)}); err != nil {
				t.Fatal(err)
			}
			if got := allowAt(t, s, now, leaseReq(key, l, 0, "b"))[0]; got.Remaining != 68 {
				t.Errorf("after a give-back of a lease granted before the flush: remaining %d, want 68", got.Remaining)
			}
		})
	}
}

// TestQuotaOutCountsLiveLeases: a key's units out (the admin API's
// leased, what spares a ban) are those of its leases not yet ended: three
// grants of 50, 200 ms apart, leave 50 out once the first two ended (the
// units out once counted every grant until the last one ended).
func TestQuotaOutCountsLiveLeases(t *testing.T) {
	ctx := context.Background()
	for name, store := range settlingStores(t) {
		for _, l := range leaseLimits() {
			t.Run(name+"/"+string(l.Algorithm), func(t *testing.T) {
				l.Events = 1000
				key := fmt.Sprintf("live:%s:{%d}", l.Algorithm, rand.Int64())
				for i := range 3 {
					at := t0.Add(time.Duration(i) * 200 * time.Millisecond)
					ds, err := store.AllowAt(ctx, at, []algorithms.Request{leaseReq(key, l, 50, "a")})
					if err != nil || ds[0].Quota.Units != 50 {
						t.Fatalf("grant %d: %+v, %v; want 50 units", i, ds, err)
					}
				}
				ds, err := store.AllowAt(ctx, t0.Add(460*time.Millisecond), []algorithms.Request{leaseReq(key, l, 0, "b")})
				if err != nil {
					t.Fatal(err)
				}
				if got := ds[0].Quota.Out; got != 50 {
					t.Errorf("units out once two of three leases ended: got %d, want 50", got)
				}
			})
		}
	}
}

// TestGiveBacksReported: the store says of each give-back whether Redis
// took it: a first one is taken, the same sent twice, or one of a
// generation a reset ended, is refused; a give-back a second late (past
// its lease's end + quota_lease, within the grace) is still taken.
func TestGiveBacksReported(t *testing.T) {
	s := New(redistest.Start(t).Client(t), Options{})
	type report struct {
		units int64
		taken bool
	}
	var got []report
	s.ReportGiveBacks(func(_ string, units int64, taken bool) { got = append(got, report{units, taken}) })
	ctx := context.Background()
	l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 100, Window: 10 * time.Second}
	key := fmt.Sprintf("reported:{%d}", rand.Int64())
	req := leaseReq(key, l, 10, "a")
	d := allowAt(t, s, t0, req)[0]
	late := t0.Add(250*time.Millisecond + algorithms.DefaultQuotaLease + algorithms.QuotaGiveBackGrace/2)
	gb := algorithms.GiveBackOf(req, d, 10)
	for _, at := range []time.Time{late, late} {
		if err := s.GiveBackAt(ctx, at, []algorithms.GiveBack{gb}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Reset(ctx, key); err != nil {
		t.Fatal(err)
	}
	d = allowAt(t, s, t0.Add(time.Second), req)[0]
	stale := d
	stale.Quota.Generation--
	if err := s.GiveBackAt(ctx, t0.Add(time.Second), []algorithms.GiveBack{algorithms.GiveBackOf(req, stale, 5)}); err != nil {
		t.Fatal(err)
	}
	want := []report{{10, true}, {10, false}, {5, false}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("reports: got %v, want %v", got, want)
	}
}

// TestColdKeysNoLeaseTax: keys seen once each (10^5 clients, say) of a
// leasing zone run the same Redis commands, as many times, as with
// quota_lease off: an instance that does not track a key sends it
// Untracked, and no lease bookkeeping is read for it (an EXISTS each, and
// a longer reply, before); so does a hot key whose zone can lease
// nothing worth having.
func TestColdKeysNoLeaseTax(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s := New(c, Options{})
	q := quota.NewLeases(s, s, "cold", nil)
	t.Cleanup(func() { _ = q.Close() })
	commands := func(l algorithms.Limit, leaseFor time.Duration, keys int) map[string]int64 {
		t.Helper()
		if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		for i := range 300 {
			r := algorithms.Request{Key: fmt.Sprintf("%s/%v/%v/%d", l.Algorithm, l.Window, leaseFor, i%keys), Limit: l, Cost: 1,
				Quota: algorithms.QuotaAsk{For: leaseFor}}
			ds, err := q.Allow(context.Background(), []algorithms.Request{r})
			if err != nil || !ds[0].Allowed || ds[0].Quota != (algorithms.QuotaGrant{}) {
				t.Fatalf("cold key %d: %+v, %v; want admitted, no lease bookkeeping", i, ds, err)
			}
		}
		calls := map[string]int64{}
		for name, stats := range redistest.ReadInfo(t, c, "commandstats") {
			// PEXPIRE runs when a key's TTL has fallen enough, so its count
			// follows the clock, not the decisions
			if cmd, ok := strings.CutPrefix(name, "cmdstat_"); ok && cmd != "info" && cmd != "pexpire" && !strings.HasPrefix(cmd, "config") {
				calls[cmd] = redistest.Info{name: stats}.Stat(name, "calls")
			}
		}
		return calls
	}
	for i, l := range leaseLimits() {
		l.Events = 1_000_000_000
		if i == 0 {
			commands(l, time.Millisecond, 300) // the Functions loaded, the server probed
		}
		off, on := commands(l, 0, 300), commands(l, 250*time.Millisecond, 300)
		if !maps.Equal(off, on) {
			t.Errorf("%s: commands with quota_lease off %v, leasing %v; want the same", l.Algorithm, off, on)
		}
	}
	// one hot key of a zone that can lease nothing worth having (a
	// sliding_log of 10,000 per 100 ms: leases of 2 ms): tracked, and
	// still sent as without leases
	hot := algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: 10_000, Window: 100 * time.Millisecond}
	off, on := commands(hot, 0, 1), commands(hot, 250*time.Millisecond, 1)
	if !maps.Equal(off, on) {
		t.Errorf("a hot sliding_log key that cannot lease: commands with quota_lease off %v, leasing %v; want the same", off, on)
	}
}
