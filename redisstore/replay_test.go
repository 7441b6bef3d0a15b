package redisstore

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

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
