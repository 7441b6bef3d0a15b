package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestBatchDecidesInOrder sends one batch by hand: its requests are
// decided in order, each all-or-nothing, a later one seeing what the earlier
// ones consumed, on Functions and on scripts.
func TestBatchDecidesInOrder(t *testing.T) {
	srv := redistest.Start(t)
	for _, scripts := range []bool{false, true} {
		t.Run(fmt.Sprintf("scripts=%v", scripts), func(t *testing.T) {
			s := New(srv.Client(t), Options{Scripts: scripts})
			id := rand.Int64()
			limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 3, Window: time.Hour}
			tight := algorithms.Request{Key: fmt.Sprint("order:tight:", id), Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 1, Window: time.Hour}, Cost: 1}
			one := algorithms.Request{Key: fmt.Sprint("order:key:", id), Limit: limit, Cost: 1}
			two := []algorithms.Request{one, tight}
			batch := []*pending{
				{mode: modeConsume, reqs: []algorithms.Request{one}},                                             // 1 of 3
				{mode: modeConsume, reqs: two},                                                                   // 2 of 3, tight 1 of 1
				{mode: modeConsume, reqs: two},                                                                   // tight denies: consumes nothing
				{mode: modePeek, reqs: []algorithms.Request{one}},                                                // looks: remaining 1
				{mode: modeConsume, reqs: []algorithms.Request{one}},                                             // 3 of 3
				{mode: modeConsume, reqs: []algorithms.Request{one}},                                             // denied
				{mode: modeSettle, ss: []algorithms.Settlement{{Key: tight.Key, Limit: tight.Limit, Delta: -1}}}, // tight back to whole
				{mode: modeConsume, reqs: []algorithms.Request{tight}},
			}
			s.sendBatch(context.Background(), batch, nil)
			want := []struct {
				admitted  bool
				remaining int64 // of the first zone
			}{{true, 2}, {true, 1}, {false, 1}, {true, 1}, {true, 0}, {false, 0}, {true, 0}, {true, 0}}
			for i, p := range batch {
				if p.err != nil {
					t.Fatalf("request %d: %v", i, p.err)
				}
				if p.mode == modeSettle {
					if got := len(p.ds); got != 0 {
						t.Errorf("settle: got %d decisions, want 0", got)
					}
					continue
				}
				if got := algorithms.Admitted(p.reqs, p.ds); got != want[i].admitted {
					t.Errorf("request %d: got admitted=%v, want %v", i, got, want[i].admitted)
				}
				if got := p.ds[0].Remaining; got != want[i].remaining {
					t.Errorf("request %d: got remaining %d, want %d", i, got, want[i].remaining)
				}
				if p.ds[0].At != batch[0].ds[0].At {
					t.Errorf("request %d: decided at %d, want %d (one Redis TIME per call)", i, p.ds[0].At, batch[0].ds[0].At)
				}
			}
		})
	}
}

// TestBatchIsolatesFailures: a request that fails in Redis (a key of the
// wrong type; an algorithm the code does not know) gets its own error and
// consumes nothing, and the requests around it in the batch are decided.
func TestBatchIsolatesFailures(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	for _, scripts := range []bool{false, true} {
		t.Run(fmt.Sprintf("scripts=%v", scripts), func(t *testing.T) {
			s := New(srv.Client(t), Options{Scripts: scripts})
			id := rand.Int64()
			list := fmt.Sprint("fail:list:", id)
			if err := client.LPush(context.Background(), list, "x").Err(); err != nil {
				t.Fatal(err)
			}
			limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 10, Window: time.Hour}
			good := algorithms.Request{Key: fmt.Sprint("fail:good:", id), Limit: limit, Cost: 1}
			batch := []*pending{
				{mode: modeConsume, reqs: []algorithms.Request{good}},
				{mode: modeConsume, reqs: []algorithms.Request{good, {Key: list, Limit: limit, Cost: 1}}},
				{mode: modeConsume, reqs: []algorithms.Request{good, {Key: fmt.Sprint("fail:alg:", id), Limit: algorithms.Limit{Algorithm: "leaky", Events: 1, Window: time.Hour}, Cost: 1}}},
				{mode: modeConsume, reqs: []algorithms.Request{good}},
			}
			s.sendBatch(context.Background(), batch, nil)
			tests := []struct {
				wantErr       string
				wantRemaining int64
			}{{"", 9}, {"WRONGTYPE", 0}, {"unknown algorithm leaky", 0}, {"", 8}}
			for i, tt := range tests {
				p := batch[i]
				if tt.wantErr == "" {
					if p.err != nil || len(p.ds) != len(p.reqs) {
						t.Fatalf("request %d: got %v, %d decisions, want decided", i, p.err, len(p.ds))
					}
					if got := p.ds[0].Remaining; got != tt.wantRemaining {
						t.Errorf("request %d: got remaining %d, want %d (failed requests consumed)", i, got, tt.wantRemaining)
					}
					continue
				}
				if p.err == nil || !strings.Contains(p.err.Error(), tt.wantErr) {
					t.Errorf("request %d: got error %v, want one containing %q", i, p.err, tt.wantErr)
				}
			}
		})
	}
}

// TestBatchSlidingLogSharesNow: requests of one batch are decided at one
// now, so their sliding_log units share one entry (one member, whatever
// the cost), each request adding its own units, and a settlement in the
// batch gives back and takes exactly what it says.
func TestBatchSlidingLogSharesNow(t *testing.T) {
	srv := redistest.Start(t)
	s := New(srv.Client(t), Options{})
	limit := algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: 100, Window: time.Hour}
	r := algorithms.Request{Key: fmt.Sprint("shared-now:", rand.Int64()), Limit: limit, Cost: 3}
	batch := []*pending{
		{mode: modeConsume, reqs: []algorithms.Request{r}},
		{mode: modeConsume, reqs: []algorithms.Request{r}},
		{mode: modeSettle, ss: []algorithms.Settlement{{Key: r.Key, Limit: limit, Delta: -2}}},
		{mode: modeConsume, reqs: []algorithms.Request{r}},
		{mode: modeSettle, ss: []algorithms.Settlement{{Key: r.Key, Limit: limit, Delta: 5}}},
		{mode: modePeek, reqs: []algorithms.Request{r}},
	}
	// the settlements need the reservation's time: decide the first alone
	// to learn the clock, then send the rest in one batch at that now
	first := batch[:1]
	s.sendBatch(context.Background(), first, nil)
	if first[0].err != nil {
		t.Fatal(first[0].err)
	}
	now := first[0].ds[0].At
	for _, p := range batch[1:] {
		p.now = fmt.Sprint(now)
		if p.mode == modeSettle {
			p.ss[0].At = now
		}
	}
	s.sendBatch(context.Background(), batch[1:], nil)
	for i, p := range batch {
		if p.err != nil {
			t.Fatalf("request %d: %v", i, p.err)
		}
	}
	// 3 + 3 - 2 + 3 + 5 entries at one stamp
	if got, want := batch[5].ds[0].Remaining, limit.Events-12; got != want {
		t.Errorf("remaining: got %d, want %d", got, want)
	}
	// one entry for the stamp, whatever the units, beside the total
	members, err := srv.Client(t).ZRangeWithScores(context.Background(), r.Key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := []redis.Z{{Score: -13, Member: "#"}, {Score: float64(now), Member: fmt.Sprint(now, ":12")}}
	if fmt.Sprint(members) != fmt.Sprint(want) {
		t.Errorf("members: got %v, want %v", members, want)
	}
}

// TestDecisionsUnfoldRemaining: the decide code folds allowed into
// remaining (2 × remaining + allowed); decisions unfolds it for every
// sign, a debt's negative remaining included, up to 2^52; the next value
// is a denial's retry or an admission's delay.
func TestDecisionsUnfoldRemaining(t *testing.T) {
	tests := []struct {
		allowed   bool
		remaining int64
	}{
		{true, 0}, {false, 0}, {true, 41}, {false, 41},
		{false, -1}, {true, -3}, {false, -1 << 40}, {true, 1 << 51}, {false, 1<<52 - 1},
	}
	for _, tt := range tests {
		bit := int64(0)
		if tt.allowed {
			bit = 1
		}
		// what decide.lua computes: 2 * remaining + (ok and 1 or 0)
		v := []int64{2*tt.remaining + bit, 7, 8, 9}
		ds := decisions([]algorithms.Request{{}}, v, 42)
		if len(ds) != 1 {
			t.Fatalf("decisions(%v): got %d, want 1", v, len(ds))
		}
		d := ds[0]
		if d.Allowed != tt.allowed || d.Remaining != tt.remaining {
			t.Errorf("decisions(%v): got allowed=%v remaining=%d, want %v, %d", v, d.Allowed, d.Remaining, tt.allowed, tt.remaining)
		}
		// the second value is a denial's retry, an admission's delay
		retry, delay := 7*time.Microsecond, time.Duration(0)
		if tt.allowed {
			retry, delay = 0, 7*time.Microsecond
		}
		if d.RetryAfter != retry || d.Delay != delay || d.ResetAfter != 8*time.Microsecond || d.MoreAfter != 9*time.Microsecond || d.At != 42 {
			t.Errorf("decisions(%v): got %+v, want retry %v, delay %v, reset 8µs, more 9µs, at 42", v, d, retry, delay)
		}
	}
}

// argStrings is c's arguments as strings.
func argStrings(c *call) []string {
	return slices.Clone(c.args)
}

// TestEncodeBatchPastItsEstimate: a batch's request strings share one
// buffer; when they outgrow its first size (long concurrency slot ids
// here), each still reads as it does encoded alone.
func TestEncodeBatchPastItsEstimate(t *testing.T) {
	slot := strings.Repeat("ab", 300)
	limit := algorithms.Limit{Algorithm: algorithms.Concurrency, Events: 10}
	var batch []*pending
	for i := range 5 {
		reqs := []algorithms.Request{{Key: fmt.Sprint("c:{", i, "}"), Limit: limit, Cost: 1, Slot: slot[:100*i]}}
		batch = append(batch, &pending{mode: modeConsume, reqs: reqs})
	}
	got := argStrings(encode(batch))
	for i, p := range batch {
		if alone := argStrings(encode([]*pending{p}))[0]; got[i] != alone {
			t.Errorf("request %d: got %q in the batch, %q alone", i, got[i], alone)
		}
		if !strings.HasSuffix(got[i], " "+p.reqs[0].Slot+" 0") {
			t.Errorf("request %d: %q does not end in its slot", i, got[i])
		}
	}
}

// TestBatchRepeatedStrings: a request whose string is the one before it
// is sent as "" and decided as that one, after a request that failed
// too, on Functions and on scripts.
func TestBatchRepeatedStrings(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	for _, scripts := range []bool{false, true} {
		t.Run(fmt.Sprintf("scripts=%v", scripts), func(t *testing.T) {
			s := New(srv.Client(t), Options{Scripts: scripts})
			id := rand.Int64()
			list := fmt.Sprint("repeat:list:", id)
			if err := client.LPush(context.Background(), list, "x").Err(); err != nil {
				t.Fatal(err)
			}
			limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 2, Window: time.Hour}
			req := func(key string) *pending {
				return &pending{mode: modeConsume, reqs: []algorithms.Request{{Key: key, Limit: limit, Cost: 1}}}
			}
			a, b := fmt.Sprint("repeat:a:", id), fmt.Sprint("repeat:b:", id)
			batch := []*pending{req(a), req(a), req(list), req(a), req(b)}
			c := encode(batch)
			if c.args[0] == "" || slices.ContainsFunc(c.args[1:], func(s string) bool { return s != "" }) {
				t.Fatalf("args: got %q, want the first string, then \"\" for each repeat", c.args)
			}
			s.sendBatch(context.Background(), batch, nil)
			want := []struct {
				err       string
				admitted  bool
				remaining int64
			}{{"", true, 1}, {"", true, 0}, {"WRONGTYPE", false, 0}, {"", false, 0}, {"", true, 1}}
			for i, w := range want {
				p := batch[i]
				if w.err != "" {
					if p.err == nil || !strings.Contains(p.err.Error(), w.err) {
						t.Errorf("request %d: got error %v, want %s", i, p.err, w.err)
					}
					continue
				}
				if p.err != nil {
					t.Fatalf("request %d: %v", i, p.err)
				}
				if got := algorithms.Admitted(p.reqs, p.ds); got != w.admitted || p.ds[0].Remaining != w.remaining {
					t.Errorf("request %d: got admitted=%v remaining %d, want %v %d", i, got, p.ds[0].Remaining, w.admitted, w.remaining)
				}
			}
		})
	}
}
