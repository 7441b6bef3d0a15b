package sluice

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
	"github.com/sluicehq/caddy-sluice/redisstore"
)

// TestCause: store failures are named from the errors the Redis store
// really returns, including errors raised inside the decide script.
func TestCause(t *testing.T) {
	full := redistest.Start(t)
	if err := full.Client(t).ConfigSet(context.Background(), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	primary := redistest.Start(t)
	_, port, err := net.SplitHostPort(primary.Addr)
	if err != nil {
		t.Fatal(err)
	}
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", port)

	tests := []struct {
		name string
		addr string
		ctx  func() (context.Context, context.CancelFunc)
		skew bool // a period zone's boundaries 3 days behind Redis's clock
		want string
	}{
		{"out of memory inside the script", full.Addr, background, false, "out_of_memory"},
		{"a write on a replica inside the script", replica.Addr, background, false, "unavailable"},
		{"connection refused", closedPort(t), background, false, "connection"},
		{"deadline", primary.Addr, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Nanosecond)
		}, false, "timeout"},
		{"clock skew on a period zone", primary.Addr, background, true, "clock_skew"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: tt.addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = client.Close() })
			ctx, cancel := tt.ctx()
			defer cancel()
			req := []algorithms.Request{{Key: "cause:" + tt.name, Cost: 1,
				Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 5, Window: time.Hour}}}
			if tt.skew {
				day := algorithms.Calendar{Period: algorithms.PeriodDay, Location: time.UTC}
				req[0].Limit.Window, req[0].Limit.Calendar = 0, day
				req[0].Limit.Periods = day.PeriodsAt(time.Now().Add(-72 * time.Hour))
			}
			_, err := redisstore.New(client, redisstore.Options{}).Allow(ctx, req)
			if err == nil {
				t.Fatal("got no error, want a failure")
			}
			if got := cause(err); got != tt.want {
				t.Errorf("cause(%v): got %q, want %q", err, got, tt.want)
			}
		})
	}
	if got, want := cause(fmt.Errorf("deciding: %w", algorithms.ErrCircuitOpen)), "circuit_open"; got != want {
		t.Errorf("cause of an open breaker: got %q, want %q", got, want)
	}
}

func background() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}
