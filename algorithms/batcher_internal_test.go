package algorithms

import (
	"context"

	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestBatchDecidesInOrder sends one batch by hand: its requests are
// decided in order, each all-or-nothing, a later one seeing what the earlier
// ones consumed, on Functions and on scripts.
func TestBatchDecidesInOrder(t *testing.T) {
	srv := redistest.Start(t)
	for _, scripts := range []bool{false, true} {
		t.Run(fmt.Sprintf("scripts=%v", scripts), func(t *testing.T) {
			s := NewRedisStoreWith(srv.Client(t), RedisOptions{Scripts: scripts})
			id := rand.Int64()
			limit := Limit{Algorithm: FixedWindow, Events: 3, Window: time.Hour}
			tight := Request{Key: fmt.Sprint("order:tight:", id), Limit: Limit{Algorithm: TokenBucket, Events: 1, Window: time.Hour}, Cost: 1}
			one := Request{Key: fmt.Sprint("order:key:", id), Limit: limit, Cost: 1}
			two := []Request{one, tight}
			batch := []*pending{
				{mode: modeConsume, reqs: []Request{one}},                                             // 1 of 3
				{mode: modeConsume, reqs: two},                                                        // 2 of 3, tight 1 of 1
				{mode: modeConsume, reqs: two},                                                        // tight denies: consumes nothing
				{mode: modePeek, reqs: []Request{one}},                                                // looks: remaining 1
				{mode: modeConsume, reqs: []Request{one}},                                             // 3 of 3
				{mode: modeConsume, reqs: []Request{one}},                                             // denied
				{mode: modeSettle, ss: []Settlement{{Key: tight.Key, Limit: tight.Limit, Delta: -1}}}, // tight back to whole
				{mode: modeConsume, reqs: []Request{tight}},
			}
			s.sendBatch(context.Background(), batch)
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
				if got := Admitted(p.reqs, p.ds); got != want[i].admitted {
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

// TestRetryOnlyWhenNothingRan: only a server saying the code is missing
// makes a call safe to run again; a connection error may follow a call that
// ran, and is never retried.
func TestRetryOnlyWhenNothingRan(t *testing.T) {
	tests := []struct {
		err          error
		scripts      bool
		wantRetry    bool
		wantFallback bool
	}{
		{redisError("ERR Function not found"), false, true, false},
		{redisError("ERR unknown command 'FCALL', with args beginning with: "), false, true, true},
		{redisError("ERR unknown command 'FUNCTION', with args beginning with: 'LOAD'"), false, true, true},
		{redisError("NOSCRIPT No matching script. Please use EVAL."), true, true, false},
		{redisError("NOSCRIPT No matching script. Please use EVAL."), false, false, false},
		{redisError("ERR Function not found"), true, false, false},
		{redisError("ERR Error running script: boom"), false, false, false},
		{io.EOF, false, false, false},
		{io.ErrUnexpectedEOF, true, false, false},
		{context.DeadlineExceeded, false, false, false},
		{nil, false, false, false},
	}
	for _, tt := range tests {
		got := len(missing([]*call{{err: tt.err}}, tt.scripts)) == 1
		if got != tt.wantRetry {
			t.Errorf("%v (scripts=%v): got retry=%v, want %v", tt.err, tt.scripts, got, tt.wantRetry)
		}
		if got := noFunctions(tt.err); got != tt.wantFallback {
			t.Errorf("%v: got fallback=%v, want %v", tt.err, got, tt.wantFallback)
		}
	}
}

type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

var _ redis.Error = redisError("")

// TestKeySlot: the slots Redis Cluster itself reports (CLUSTER KEYSLOT).
func TestKeySlot(t *testing.T) {
	tests := []struct {
		key  string
		want uint16
	}{
		{"foo", 12182},
		{"a", 15495},
		{"loose:1:{a}", 15495},
		{"tight:1:{b}", 3300},
		{"{}x", 10595},    // empty tag: the whole key
		{"x{}{a}", 15756}, // the first tag only, even if empty
		{"", 0},
	}
	for _, tt := range tests {
		if got := keySlot(tt.key); got != tt.want {
			t.Errorf("keySlot(%q): got %d, want %d", tt.key, got, tt.want)
		}
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
			s := NewRedisStoreWith(srv.Client(t), RedisOptions{Scripts: scripts})
			id := rand.Int64()
			list := fmt.Sprint("fail:list:", id)
			if err := client.LPush(context.Background(), list, "x").Err(); err != nil {
				t.Fatal(err)
			}
			limit := Limit{Algorithm: FixedWindow, Events: 10, Window: time.Hour}
			good := Request{Key: fmt.Sprint("fail:good:", id), Limit: limit, Cost: 1}
			batch := []*pending{
				{mode: modeConsume, reqs: []Request{good}},
				{mode: modeConsume, reqs: []Request{good, {Key: list, Limit: limit, Cost: 1}}},
				{mode: modeConsume, reqs: []Request{good, {Key: fmt.Sprint("fail:alg:", id), Limit: Limit{Algorithm: "leaky", Events: 1, Window: time.Hour}, Cost: 1}}},
				{mode: modeConsume, reqs: []Request{good}},
			}
			s.sendBatch(context.Background(), batch)
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
	s := NewRedisStoreWith(srv.Client(t), RedisOptions{})
	limit := Limit{Algorithm: SlidingLog, Events: 100, Window: time.Hour}
	r := Request{Key: fmt.Sprint("shared-now:", rand.Int64()), Limit: limit, Cost: 3}
	batch := []*pending{
		{mode: modeConsume, reqs: []Request{r}},
		{mode: modeConsume, reqs: []Request{r}},
		{mode: modeSettle, ss: []Settlement{{Key: r.Key, Limit: limit, Delta: -2}}},
		{mode: modeConsume, reqs: []Request{r}},
		{mode: modeSettle, ss: []Settlement{{Key: r.Key, Limit: limit, Delta: 5}}},
		{mode: modePeek, reqs: []Request{r}},
	}
	// the settlements need the reservation's time: decide the first alone
	// to learn the clock, then send the rest in one batch at that now
	first := batch[:1]
	s.sendBatch(context.Background(), first)
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
	s.sendBatch(context.Background(), batch[1:])
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
