package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// bigStep is one request of a step table at a large size; more is the
// expected MoreAfter, or -1 to leave it unchecked.
type bigStep struct {
	at        time.Duration // after the first window start at or after t0
	cost      int64
	allowed   bool
	remaining int64
	retry     time.Duration // when denied
	more      time.Duration
}

const (
	day   = 24 * time.Hour
	us    = time.Microsecond
	skip  = -1
	year  = algorithms.MaxWindow // 366 days
	prime = 999_999_937          // no common factor with any window
)

// TestLargeLimitSteps: daily, monthly and yearly plans and 10^9 a minute,
// where events × window passes 2^53 (Lua doubles) and 2^63 (int64), decide
// exactly on both stores.
func TestLargeLimitSteps(t *testing.T) {
	tests := []struct {
		name  string
		limit algorithms.Limit
		steps []bigStep
	}{
		{"token_bucket_1e9_a_minute", algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1_000_000_000, Window: time.Minute}, []bigStep{
			{0, 1_000_000_000, true, 0, 0, us}, // 16⅔ tokens a µs
			{0, 1, false, 0, us, us},
			// 1µs drains 16 tokens and ⅔ of one: 16 whole ones are back
			{us, 16, true, 0, 0, us},
			{us, 1, false, 0, us, us},
			{time.Minute + us, 1_000_000_000, true, 0, 0, skip},
			{90*time.Second + us, 500_000_001, false, 500_000_000, us, us},
			{90*time.Second + us, 500_000_000, true, 0, 0, us},
		}},
		{"sliding_window_1e5_a_day", algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 100_000, Window: day}, []bigStep{
			// slots of 72 minutes: the first, [0, 72m), counts until day + 72m
			{0, 100_000, true, 0, 0, day + 72*time.Minute},
			{12 * time.Hour, 1, false, 0, 13*time.Hour + 12*time.Minute, 13*time.Hour + 12*time.Minute},
			{day + 72*time.Minute - us, 1, false, 0, us, us},
			{day + 72*time.Minute, 60_000, true, 40_000, 0, day + 72*time.Minute},
			// slot [day+144m, day+216m): the oldest, 60000, leaves at 2 days + 144m
			{day + 3*time.Hour, 40_000, true, 0, 0, day - 36*time.Minute},
			{day + 3*time.Hour, 1, false, 0, day - 36*time.Minute, day - 36*time.Minute},
			// 60001 need the second slot to leave too
			{day + 3*time.Hour, 60_001, false, 0, day + 36*time.Minute, day - 36*time.Minute},
		}},
		{"token_bucket_1e5_a_day", algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 100_000, Window: day}, []bigStep{
			{0, 100_000, true, 0, 0, 864 * time.Millisecond},
			{0, 1, false, 0, 864 * time.Millisecond, 864 * time.Millisecond},
			{12 * time.Hour, 50_000, true, 0, 0, 864 * time.Millisecond},
			{12 * time.Hour, 2, false, 0, 1728 * time.Millisecond, 864 * time.Millisecond},
		}},
		{"fixed_window_5e6_a_month", algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 5_000_000, Window: 30 * day}, []bigStep{
			{0, 5_000_000, true, 0, 0, 30 * day},
			{15 * day, 1, false, 0, 15 * day, 15 * day},
			{30 * day, 5_000_000, true, 0, 0, 30 * day},
		}},
		{"sliding_window_5e6_a_month", algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 5_000_000, Window: 30 * day}, []bigStep{
			// slots of 36 hours
			{0, 5_000_000, true, 0, 0, 30*day + 36*time.Hour},
			{30*day + 36*time.Hour - us, 1, false, 0, us, us},
			{30*day + 36*time.Hour, 2_499_999, true, 2_500_001, 0, 30*day + 36*time.Hour},
			// the slot [31.5 days, 33 days) leaves at 63 days
			{45 * day, 2_500_001, true, 0, 0, 18 * day},
			{45 * day, 1, false, 0, 18 * day, 18 * day},
		}},
		{"token_bucket_5e6_a_month", algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 5_000_000, Window: 30 * day}, []bigStep{
			{0, 5_000_000, true, 0, 0, 518400 * us},
			{0, 1, false, 0, 518400 * us, 518400 * us},
			{518400 * us, 1, true, 0, 0, 518400 * us},
			{518400 * us, 2, false, 0, 1036800 * us, 518400 * us},
		}},
		{"token_bucket_prime_a_year_burst_1e9", algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: prime, Window: year, Burst: 1_000_000_000}, []bigStep{
			// one token every 31622.4000…µs: ceil is 31623µs
			{0, 1_000_000_000, true, 0, 0, 31623 * us},
			{0, 1, false, 0, 31623 * us, 31623 * us},
			// 31622µs drain all but 401992186 units of a token (< events)
			{31622 * us, 1, false, 0, us, us},
			{31623 * us, 1, true, 0, 0, skip},
		}},
		{"sliding_window_prime_a_year", algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: prime, Window: year}, []bigStep{
			// slots of year/20 = 439.2 hours
			{0, prime, true, 0, 0, year + year/20},
			{year + year/20 - us, 1, false, 0, us, us},
			// a year and a half is the start of slot 30, which leaves at slot 51's start
			{year + year/2, 499_999_969, true, 499_999_968, 0, year + year/20},
			{year + year/2, 499_999_968, true, 0, 0, year + year/20},
			{year + year/2 + us, 1, false, 0, year + year/20 - us, year + year/20 - us},
		}},
	}
	for _, tt := range tests {
		for name, store := range stores(t) {
			t.Run(tt.name+"/"+name, func(t *testing.T) {
				runBigSteps(t, store, tt.limit, tt.steps)
			})
		}
	}
}

func runBigSteps(t *testing.T, store clockedStore, limit algorithms.Limit, steps []bigStep) {
	t.Helper()
	if err := limit.Validate(); err != nil {
		t.Fatalf("limit %+v: %v", limit, err)
	}
	base := aligned(limit.Window)
	key := fmt.Sprintf("big:%d", rand.Int64())
	for i, s := range steps {
		ds, err := store.AllowAt(context.Background(), base.Add(s.at), []algorithms.Request{{Key: key, Limit: limit, Cost: s.cost}})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		d := ds[0]
		if d.Allowed != s.allowed || d.Remaining != s.remaining || (!s.allowed && d.RetryAfter != s.retry) ||
			(s.more != skip && d.MoreAfter != s.more) {
			t.Errorf("step %d at %v cost %d: got allowed=%v remaining=%d retry=%v more=%v, want allowed=%v remaining=%d retry=%v more=%v",
				i, s.at, s.cost, d.Allowed, d.Remaining, d.RetryAfter, d.MoreAfter, s.allowed, s.remaining, s.retry, s.more)
		}
	}
}

// aligned is the first start of a window at or after t0 (windows start at
// multiples of the window since the Unix epoch).
func aligned(window time.Duration) time.Time {
	w, now := window.Microseconds(), t0.UnixMicro()
	return time.UnixMicro(now + (w-now%w)%w)
}

// TestHugeDrainSaturates: a bucket of 10^9 refilled once a year takes 10^9
// years to drain; its ResetAfter is capped (2^52 µs, ~142 years) on both
// stores, while one token still returns, exactly, after a year.
func TestHugeDrainSaturates(t *testing.T) {
	limit := algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1, Window: year, Burst: 1_000_000_000}
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			key := fmt.Sprintf("huge:%d", rand.Int64())
			steps := []struct {
				cost             int64
				allowed          bool
				retry, more, rst time.Duration
			}{
				{1_000_000_000, true, 0, year, maxTime},
				{1, false, year, year, maxTime},
			}
			for i, s := range steps {
				ds, err := store.AllowAt(context.Background(), t0, []algorithms.Request{{Key: key, Limit: limit, Cost: s.cost}})
				if err != nil {
					t.Fatal(err)
				}
				d := ds[0]
				if d.Allowed != s.allowed || (!s.allowed && d.RetryAfter != s.retry) || d.MoreAfter != s.more || d.ResetAfter != s.rst {
					t.Errorf("step %d: got allowed=%v retry=%v more=%v reset=%v, want allowed=%v retry=%v more=%v reset=%v",
						i, d.Allowed, d.RetryAfter, d.MoreAfter, d.ResetAfter, s.allowed, s.retry, s.more, s.rst)
				}
			}
		})
	}
}
