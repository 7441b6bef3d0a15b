package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// delayed is 10/s with a burst of 1 and max_delay 1s: the bucket of the
// integration test.
var delayed = algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 10, Window: time.Second, Burst: 1, MaxDelay: time.Second}

// TestMaxDelayReservations: at one instant, the first request passes, the
// next ten are admitted with reservations 100ms apart, and the rest are
// denied, consuming nothing, with the retry at which their wait is
// max_delay; on both stores.
func TestMaxDelayReservations(t *testing.T) {
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			key := "delay:" + name
			for i := range 14 {
				ds := allowOne(t, store, t0, key, delayed, 1)
				d := ds[0]
				switch {
				case i == 0:
					if !d.Allowed || d.Delay != 0 {
						t.Fatalf("request %d: got %+v, want admitted at once", i, d)
					}
				case i <= 10:
					want := time.Duration(i) * 100 * time.Millisecond
					if !d.Allowed || d.Delay != want || d.RetryAfter != 0 || d.Remaining > 0 {
						t.Fatalf("request %d: got %+v, want admitted with delay %v, remaining ≤ 0", i, d, want)
					}
					if wantMore := want + 100*time.Millisecond; d.MoreAfter != wantMore {
						t.Fatalf("request %d: more after: got %v, want %v", i, d.MoreAfter, wantMore)
					}
				default:
					if d.Allowed || d.Delay != 0 || d.RetryAfter != 100*time.Millisecond {
						t.Fatalf("request %d: got %+v, want denied, retry 100ms", i, d)
					}
				}
			}
			// the denials took nothing: 100ms later exactly one more fits within max_delay
			later := t0.Add(100 * time.Millisecond)
			if d := allowOne(t, store, later, key, delayed, 1)[0]; !d.Allowed || d.Delay != time.Second {
				t.Fatalf("after the retry: got %+v, want admitted with delay 1s", d)
			}
			if d := allowOne(t, store, later, key, delayed, 1)[0]; d.Allowed {
				t.Fatalf("second after the retry: got %+v, want denied", d)
			}
		})
	}
}

// TestMaxDelayAllOrNothing: a reservation another zone denies, or that a
// dry-run zone would take, is not taken; a dry-run zone never delays.
func TestMaxDelayAllOrNothing(t *testing.T) {
	full := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1, Window: time.Minute}
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			key := "aon:" + name
			allowOne(t, store, t0, key, delayed, 1) // the bucket is full
			allowOne(t, store, t0, key+":fw", full, 1)
			both := []algorithms.Request{
				{Key: key, Limit: delayed, Cost: 1},
				{Key: key + ":fw", Limit: full, Cost: 1},
			}
			ds, err := store.AllowAt(context.Background(), t0, both)
			if err != nil {
				t.Fatal(err)
			}
			if algorithms.Admitted(both, ds) || !ds[0].Allowed || ds[0].Delay != 100*time.Millisecond {
				t.Fatalf("got %+v, want the bucket's reservation offered and the request denied", ds)
			}
			// the denied request reserved nothing: the next one waits 100ms, not 200ms
			if d := allowOne(t, store, t0, key, delayed, 1)[0]; d.Delay != 100*time.Millisecond {
				t.Fatalf("after the denial: delay: got %v, want 100ms", d.Delay)
			}
			dry := []algorithms.Request{{Key: key + ":dry", Limit: delayed, Cost: 1, DryRun: true}}
			for i := range 3 {
				ds, err := store.AllowAt(context.Background(), t0, dry)
				if err != nil {
					t.Fatal(err)
				}
				if ds[0].Delay != 0 || ds[0].Allowed != (i == 0) {
					t.Fatalf("dry run %d: got %+v, want no delay, admitted only first", i, ds[0])
				}
			}
		})
	}
}

// TestMaxDelayRefundKeepsReservations: a refund (Cluster's, for a zone in
// another slot that denied) of a level past the debt cap gives back only
// its own cost.
func TestMaxDelayRefundKeepsReservations(t *testing.T) {
	type settler interface {
		SettleAt(ctx context.Context, now time.Time, ss []algorithms.Settlement) error
	}
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			key := "refund:" + name
			var last algorithms.Decision
			for range 6 { // 1 at once, 5 reserved: level 6 > 2 × burst
				last = allowOne(t, store, t0, key, delayed, 1)[0]
			}
			var s settler
			switch st := store.(type) {
			case memoryAt:
				s = memorySettler(st)
			case settler:
				s = st
			default:
				t.Fatalf("store %T does not settle", store)
			}
			if err := s.SettleAt(context.Background(), t0, []algorithms.Settlement{{Key: key, Limit: delayed, At: last.At, Delta: -1}}); err != nil {
				t.Fatal(err)
			}
			if d := allowOne(t, store, t0, key, delayed, 1)[0]; d.Delay != 500*time.Millisecond {
				t.Fatalf("after the refund: delay: got %v, want 500ms (5 still reserved)", d.Delay)
			}
		})
	}
}

type memorySettler struct{ *algorithms.MemoryStore }

func (m memorySettler) SettleAt(_ context.Context, now time.Time, ss []algorithms.Settlement) error {
	m.MemoryStore.SettleAt(now, ss)
	return nil
}

// allowOne decides one request of cost for key under limit at now.
func allowOne(t *testing.T, store clockedStore, now time.Time, key string, limit algorithms.Limit, cost int64) []algorithms.Decision {
	t.Helper()
	ds, err := store.AllowAt(context.Background(), now, []algorithms.Request{{Key: key, Limit: limit, Cost: cost}})
	if err != nil {
		t.Fatalf("AllowAt: %v", err)
	}
	return ds
}

// TestTokenBucketStateFormat: a bucket is stored as whole events, the
// fraction (units of an event, which is window units) and the time they
// were counted, three packed doubles, whatever its size; such a state is
// read back exactly; an earlier release's text, even at this key, is no
// state.
func TestTokenBucketStateFormat(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	store := New(client, Options{})
	ctx := context.Background()
	small := algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 10, Window: 10 * time.Second, Burst: 3}
	at := t0.UnixMicro()
	tests := []struct {
		name      string
		limit     algorithms.Limit
		preset    string // state written before the request, "" for none
		remaining int64  // after one request of cost 1
		want      string // the state stored then
	}{
		{"small", small, "", 2, redistest.PackedDoubles(1, 0, at)},
		// 2 events counted at t0: 1 left, then 0
		{"two_events", small, redistest.PackedDoubles(2, 0, at), 0, redistest.PackedDoubles(3, 0, at)},
		// half an event (5·10^6 of its 10^7 units) counted at t0: 2 whole ones left, then 1
		{"fraction", small, redistest.PackedDoubles(0, 5_000_000, at), 1, redistest.PackedDoubles(1, 5_000_000, at)},
		// half of 10^9 events (3·10^16 units, past 2^53) counted at t0: the
		// key lives the 30 s they take to drain (one event alone drains in
		// 60 µs, and would expire before the test reads it)
		{"large", algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1_000_000_000, Window: time.Minute},
			redistest.PackedDoubles(500_000_000, 0, at), 499_999_999, redistest.PackedDoubles(500_000_001, 0, at)},
		// an earlier release's "<units> <time>" (2 events): not read
		{"earlier_release_text", small, fmt.Sprintf("20000000 %d", at), 2, redistest.PackedDoubles(1, 0, at)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := fmt.Sprintf("format:%d", rand.Int64())
			if tt.preset != "" {
				if err := client.Set(ctx, key, tt.preset, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
			}
			ds, err := store.AllowAt(ctx, t0, []algorithms.Request{{Key: key, Limit: tt.limit, Cost: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if got := ds[0].Remaining; !ds[0].Allowed || got != tt.remaining {
				t.Errorf("got allowed=%v remaining=%d, want true, %d", ds[0].Allowed, got, tt.remaining)
			}
			v, err := client.Get(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if v != tt.want {
				t.Errorf("stored state: got %x, want %x", v, tt.want)
			}
		})
	}
}

// TestCallerClockKeepsState: a state written on a caller's clock (AllowAt,
// which only tests and replays use) lives a minute past its end, since
// Redis expires keys on its own clock, which runs on while the caller's
// stands still (a replay under load found buckets of a few ms refilled
// by an early expiry); on Redis's clock it lives until its end.
func TestCallerClockKeepsState(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	store := New(client, Options{})
	ctx := context.Background()
	limit := algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1000, Window: time.Second} // one event drains in 1 ms
	if _, err := store.AllowAt(ctx, t0, []algorithms.Request{{Key: "caller", Limit: limit, Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Allow(ctx, []algorithms.Request{{Key: "redis", Limit: limit, Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	// Bounds a second either side: real time passes between the write
	// and the PTTL (CI read 59.999s on a minute and 1 ms).
	if ttl := client.PTTL(ctx, "caller").Val(); ttl < time.Minute-time.Second || ttl > time.Minute+time.Second {
		t.Errorf("on a caller's clock: PTTL %v, want about a minute past its 1 ms end", ttl)
	}
	if ttl := client.PTTL(ctx, "redis").Val(); ttl > 10*time.Millisecond {
		t.Errorf("on Redis's clock: PTTL %v, want its 1 ms end", ttl)
	}
}
