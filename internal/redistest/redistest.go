// Package redistest starts real redis-server processes for tests, each on a
// free loopback port with no persistence, and stops them at the test's end.
// Where redis-server is missing the test is skipped, except under CI=true,
// where that is a failure.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one running redis-server.
type Server struct {
	Addr string // 127.0.0.1:port
	Dir  string // its working directory
	cmd  *exec.Cmd
	args []string
	out  *SyncBuffer // the running server's output
}

// Start runs a redis-server with extra arguments (e.g. "--maxmemory", "1mb")
// and waits until it answers PING.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin := Binary(t)
	port := FreePort(t)
	if slices.Contains(extra, "--cluster-enabled") {
		port = freeClusterPort(t)
	}
	dir := t.TempDir()
	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
	}, forVersion(versionOf(t, bin), extra)...)
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Dir: dir, args: append([]string{bin}, args...)}
	s.start(t)
	t.Cleanup(s.Stop)
	return s
}

// The server under test: SLUICE_REDIS_SERVER and SLUICE_REDIS_CLI name the
// redis-server and redis-cli to run (e.g. the wrappers that
// scripts/redis-servers.sh makes for Redis 6.0, 8.0 and Valkey 8.1); unset,
// they are the redis-server and redis-cli on PATH.
const (
	ServerEnv = "SLUICE_REDIS_SERVER"
	CLIEnv    = "SLUICE_REDIS_CLI"
)

// Binary is the path of redis-server ($SLUICE_REDIS_SERVER, else the one on
// PATH); it skips t (fails it under CI) when there is none.
func Binary(t testing.TB) string {
	t.Helper()
	return lookup(t, ServerEnv, "redis-server")
}

// CLI is the path of redis-cli ($SLUICE_REDIS_CLI, else the one on PATH);
// it skips t (fails it under CI) when there is none.
func CLI(t testing.TB) string {
	t.Helper()
	return lookup(t, CLIEnv, "redis-cli")
}

func lookup(t testing.TB, env, name string) string {
	t.Helper()
	want := name
	if v := os.Getenv(env); v != "" {
		want = v
	}
	bin, err := exec.LookPath(want)
	if err != nil {
		if os.Getenv("CI") == "true" || os.Getenv(env) != "" {
			t.Fatalf("%s not found (%s=%q): %v", name, env, os.Getenv(env), err)
		}
		t.Skipf("%s not found (apt-get install -y redis-server): %v", name, err)
	}
	return bin
}

func (s *Server) start(t testing.TB) {
	t.Helper()
	s.cmd = exec.Command(s.args[0], s.args[1:]...)
	s.out = &SyncBuffer{}
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	if err := pingUntilUp(c); err != nil {
		t.Fatalf("redis at %s (%s): %v\nits output:\n%s", s.Addr, strings.Join(s.args, " "), err, s.out.String())
	}
}

// Restart stops the server and starts it again on the same port, empty.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	s.start(t)
}

// Stop kills the server; it is safe to call twice.
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

// Client returns a client for the server, closed at the test's end.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// freeClusterPort returns a loopback port that, with its cluster bus port
// (the port + 10000), was free a moment ago: a node whose bus port is
// taken aborts at start.
func freeClusterPort(t testing.TB) int {
	t.Helper()
	for range 100 {
		port := FreePort(t)
		if port+10000 > 65535 {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		if err == nil {
			l.Close()
			return port
		}
	}
	t.Fatal("finding a free port and cluster bus port: none in 100 tries")
	return 0
}

// WaitPing waits up to 10 s for a Redis at addr to answer PING.
func WaitPing(t testing.TB, addr string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	if err := pingUntilUp(c); err != nil {
		t.Fatal(fmt.Errorf("redis at %s: %w", addr, err))
	}
}

// pingUntilUp polls c with PING for up to 10 s.
func pingUntilUp(c *redis.Client) error {
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
	}
	return fmt.Errorf("no PING answer after 10s: %w", err)
}

// addrsOf is the addresses of servers.
func addrsOf(servers []*Server) []string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr
	}
	return addrs
}

// waitFor polls the Redis at addr every 50 ms, for up to limit, until the
// reply that fetch gets contains want; it fails t with the last reply.
func waitFor(t testing.TB, addr string, limit time.Duration, fetch func(*redis.Client) string, want string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	var reply string
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if reply = fetch(c); strings.Contains(reply, want) {
			return
		}
	}
	t.Fatalf("redis at %s: no %q after %v:\n%s", addr, want, limit, reply)
}
