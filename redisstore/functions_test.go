package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
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
			store := New(srv.Client(t), Options{Scripts: tt.scripts})
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
	store := New(noRetries, Options{})
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
	} else if libs, err := client.FunctionList(context.Background(), redis.FunctionListQuery{LibraryNamePattern: code.LibraryName}).Result(); err != nil {
		t.Fatal(err)
	} else if got, want := len(libs), 1; got != want {
		t.Errorf("libraries named %s after the restart: got %d, want %d (loaded again)", code.LibraryName, got, want)
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
			store := New(srv.Client(t), Options{})
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

// dropProxy forwards TCP to a Redis server, and once drops the connection
// that carried a command containing trigger right after Redis received it,
// before its reply reaches the client: the command ran, the client sees a
// connection error.
type dropProxy struct {
	ln      net.Listener
	target  string
	trigger []byte
	dropped atomic.Bool
	wg      sync.WaitGroup
}

func startDropProxy(t *testing.T, target, trigger string) *dropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, target: target, trigger: []byte(trigger)}
	p.wg.Go(p.accept)
	t.Cleanup(func() { _ = ln.Close(); p.wg.Wait() })
	return p
}

func (p *dropProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		var armed atomic.Bool
		p.wg.Go(func() { p.forwardCommands(client, server, &armed) })
		p.wg.Go(func() { p.forwardReplies(server, client, &armed) })
	}
}

func (p *dropProxy) forwardCommands(client, server net.Conn, armed *atomic.Bool) {
	defer server.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			if !p.dropped.Load() && bytes.Contains(bytes.ToLower(buf[:n]), p.trigger) {
				armed.Store(true)
			}
			if _, werr := server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *dropProxy) forwardReplies(server, client net.Conn, armed *atomic.Bool) {
	defer client.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 && armed.Load() && p.dropped.CompareAndSwap(false, true) {
			_ = server.Close() // the reply is lost with the connection
			return
		}
		if n > 0 {
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestNoReplayedScript: when the connection drops after Redis ran the
// decide script but before its reply arrived, the store reports the error
// and does not run the script again (go-redis would retry it by default):
// the request consumed once, never twice.
func TestNoReplayedScript(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client(t)
	tests := []struct {
		name    string
		trigger string
		scripts bool // EVALSHA instead of Functions
	}{
		{"fcall", "fcall", false},
		{"evalsha", "evalsha", true},
		{"eval after noscript", "\r\neval\r\n", true},
	}
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 10, Window: time.Hour}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if err := direct.ScriptFlush(ctx).Err(); err != nil { // the second case runs EVAL
				t.Fatal(err)
			}
			proxy := startDropProxy(t, srv.Addr, tt.trigger)
			client := redis.NewClient(&redis.Options{Addr: proxy.ln.Addr().String()}) // go-redis's default retries
			t.Cleanup(func() { _ = client.Close() })
			store := New(client, Options{Scripts: tt.scripts})
			if tt.name != "eval after noscript" {
				if err := store.Warm(ctx); err != nil {
					t.Fatal(err)
				}
			}
			req := []algorithms.Request{{Key: "replay:" + tt.name, Limit: limit, Cost: 1}}
			_, err := store.Allow(ctx, req)
			if !proxy.dropped.Load() {
				t.Fatal("the proxy dropped no reply: the test did not exercise a lost reply")
			}
			if err == nil {
				t.Error("a decision whose reply was lost: got no error, want the connection error")
			}
			ds, err := New(direct, Options{}).Peek(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ds[0].Remaining, limit.Events-1; got != want {
				t.Errorf("remaining after one decision whose reply was lost: got %d, want %d (the script ran more than once)", got, want)
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

// TestServerName reads the server's name and version from INFO server as
// Redis and Valkey write it.
func TestServerName(t *testing.T) {
	tests := []struct{ info, want string }{
		{"# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", "redis 7.0.15"},
		// Valkey's redis_version is the Redis it is compatible with
		{"# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.1\r\n", "valkey 8.1.1"},
		{"# Server\nredis_version:6.0.16\n", "redis 6.0.16"},
		{"# Server\r\nserver_name:keydb\r\nredis_version:6.3.4\r\n", "keydb 6.3.4"},
	}
	for _, tt := range tests {
		if got := serverName(tt.info); got != tt.want {
			t.Errorf("serverName(%q): got %q, want %q", tt.info, got, tt.want)
		}
	}
}
