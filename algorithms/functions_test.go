package algorithms_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
	"github.com/sluicehq/caddy-sluice/luascripts"
)

// traffic runs Allow from 8 goroutines on fresh keys until stop is called,
// which returns how many decisions were made and how many failed.
func traffic(t *testing.T, store algorithms.Store) (stop func() (decided, failed int64)) {
	t.Helper()
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 1 << 40, Window: time.Hour}
	var done atomic.Bool
	var decided, failed atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; !done.Load(); i++ {
				reqs := []algorithms.Request{{Key: fmt.Sprintf("traffic:%d:%d", g, i%50), Limit: limit, Cost: 1}}
				if _, err := store.Allow(context.Background(), reqs); err != nil {
					failed.Add(1)
				} else {
					decided.Add(1)
				}
			}
		})
	}
	return func() (int64, int64) {
		done.Store(true)
		wg.Wait()
		return decided.Load(), failed.Load()
	}
}

// waitDecided waits until store has decided n more requests than from.
func waitDecided(t *testing.T, client *redis.Client, from, n int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if commandCalls(t, client, "fcall", "evalsha", "eval") >= from+n {
			return
		}
	}
	t.Fatalf("fewer than %d calls in 10s", n)
}

// TestFlushesUnderTraffic: FUNCTION FLUSH and SCRIPT FLUSH while requests
// flow cost not one request: a call that finds its code missing has not
// run, so the library is loaded again and the call retried once.
func TestFlushesUnderTraffic(t *testing.T) {
	tests := []struct {
		name    string
		scripts bool
		flush   func(context.Context, *redis.Client) error
		command string // the command that decides, after the flushes
	}{
		{"FUNCTION FLUSH", false, func(ctx context.Context, c *redis.Client) error { return c.FunctionFlush(ctx).Err() }, "fcall"},
		{"SCRIPT FLUSH", true, func(ctx context.Context, c *redis.Client) error { return c.ScriptFlush(ctx).Err() }, "evalsha"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if v := redistest.ServerVersion(t); !tt.scripts && !v.Functions() {
				t.Skipf("%s has no Functions", v)
			}
			srv := redistest.Start(t)
			client := srv.Client(t)
			store := algorithms.NewRedisStoreWith(srv.Client(t), algorithms.RedisOptions{Scripts: tt.scripts})
			stop := traffic(t, store)
			ctx := context.Background()
			for range 5 {
				waitDecided(t, client, commandCalls(t, client, "fcall", "evalsha", "eval"), 20)
				if err := tt.flush(ctx, client); err != nil {
					t.Fatal(err)
				}
			}
			waitDecided(t, client, commandCalls(t, client, "fcall", "evalsha", "eval"), 20)
			decided, failed := stop()
			if failed != 0 {
				t.Errorf("failed requests: got %d of %d, want 0", failed, decided+failed)
			}
			if got := commandCalls(t, client, tt.command); got == 0 {
				t.Errorf("%s calls: got 0, want the store to keep using it", tt.command)
			}
		})
	}
}

// TestRestartUnderTraffic: after redis-server restarts empty (no library,
// no scripts), the store decides again by itself. Calls on the wire when
// it died fail, and are not replayed (go-redis's own retries are off, as
// Sluice configures its client).
func TestRestartUnderTraffic(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	noRetries := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = noRetries.Close() })
	store := algorithms.NewRedisStore(noRetries)
	stop := traffic(t, store)
	waitDecided(t, client, 0, 20)
	srv.Restart(t)
	waitDecided(t, client, 0, 50) // the new server's counts start at 0
	decided, failed := stop()
	t.Logf("%d decided, %d failed around the restart", decided, failed)
	if v := redistest.ServerVersion(t); !v.Functions() {
		// no Functions: the script is loaded again, and EVALSHA decides
		if got := commandCalls(t, client, "evalsha"); got == 0 {
			t.Errorf("EVALSHA calls on %s after the restart: got 0, want the store to decide with it", v)
		}
	} else if libs, err := client.FunctionList(context.Background(), redis.FunctionListQuery{LibraryNamePattern: luascripts.LibraryName}).Result(); err != nil {
		t.Fatal(err)
	} else if got, want := len(libs), 1; got != want {
		t.Errorf("libraries named %s after the restart: got %d, want %d (loaded again)", luascripts.LibraryName, got, want)
	}
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 2, Window: time.Hour}
	reqs := []algorithms.Request{{Key: fmt.Sprint("restart:", rand.Int64()), Limit: limit, Cost: 1}}
	for i, want := range []bool{true, true, false} {
		ds, err := store.Allow(context.Background(), reqs)
		if err != nil {
			t.Fatalf("request %d after the restart: %v", i, err)
		}
		if got := ds[0].Allowed; got != want {
			t.Errorf("request %d after the restart: got allowed=%v, want %v", i, got, want)
		}
	}
}

// TestWithoutFunctions: where FUNCTION is missing (renamed away, as on
// servers without it) or FCALL too (as on Redis 6.2), the store falls back
// to EVALSHA and decides exactly as with Functions. A server without
// Functions (Redis 6) is the test as it is.
func TestWithoutFunctions(t *testing.T) {
	tests := []struct {
		name  string
		extra []string
	}{
		// an empty argument: Valkey quotes each argument into its config
		// line, so a literal `""` would be unbalanced quotes there
		{"no FUNCTION", []string{"--rename-command", "FUNCTION", ""}},
		// Redis 7.0 refuses two commands renamed to "": FCALL goes elsewhere
		{"no FUNCTION or FCALL", []string{"--rename-command", "FUNCTION", "", "--rename-command", "FCALL", "sluice_test_hidden_fcall"}},
	}
	if v := redistest.ServerVersion(t); !v.Functions() {
		tests = tests[:1]
		tests[0].name, tests[0].extra = v.String(), nil
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.Start(t, tt.extra...)
			client := srv.Client(t)
			store := algorithms.NewRedisStore(srv.Client(t))
			limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 50, Window: time.Hour}
			reqs := []algorithms.Request{{Key: fmt.Sprint("nofn:", rand.Int64()), Limit: limit, Cost: 1}}
			if got, want := admitConcurrently(t, store, reqs, 200), int64(50); got != want {
				t.Errorf("admitted: got %d, want %d", got, want)
			}
			if err := store.Warm(context.Background()); err != nil {
				t.Errorf("warm without functions: %v", err)
			}
			before := commandCalls(t, client, "evalsha")
			ds, err := store.Peek(context.Background(), reqs)
			if err != nil || ds[0].Remaining != 0 {
				t.Fatalf("peek: got %+v, %v, want remaining 0", ds, err)
			}
			if got, want := commandCalls(t, client, "evalsha")-before, int64(1); got != want {
				t.Errorf("EVALSHA calls for one peek: got %d, want %d (fallback remembered)", got, want)
			}
		})
	}
}
