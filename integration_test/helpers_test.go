// Package integration_test runs Sluice black-box: a real Caddy binary built
// from ./cmd/caddy, real redis-server processes, requests over loopback.
package integration_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// caddyBin is the Caddy binary built once in TestMain.
var caddyBin string

// readyTimeout bounds how long a Caddy process may take to start serving.
const readyTimeout = 30 * time.Second

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sluice-caddy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "creating temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)

	caddyBin = filepath.Join(dir, "caddy")
	build := exec.Command("go", "build", "-o", caddyBin, "github.com/sluicehq/caddy-sluice/cmd/caddy")
	build.Dir = ".." // the repository root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building caddy: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// caddyProc is one running `caddy run` process.
type caddyProc struct {
	URL      string // http://127.0.0.1:port, the site
	AdminURL string // http://127.0.0.1:port, the admin API
	Log      *redistest.SyncBuffer
	cmd      *exec.Cmd // the process, for a test that kills it
}

// caddyConfig is what a test varies in a generated Caddyfile.
type caddyConfig struct {
	Global string // extra global options, inside the global block
	Site   string // the site block's body
}

// startCaddy writes a Caddyfile with the site on a free loopback port and
// the admin API on another, runs Caddy on it, and waits until both listen.
// The process is killed at the test's end; its log is printed if the test
// failed.
func startCaddy(t *testing.T, cfg caddyConfig) *caddyProc {
	t.Helper()
	port, adminPort := redistest.FreePort(t), redistest.FreePort(t)
	for adminPort == port {
		adminPort = redistest.FreePort(t)
	}
	global := ""
	if cfg.Global != "" {
		global = cfg.Global + "\n"
	}
	caddyfile := fmt.Sprintf("{\n\tadmin 127.0.0.1:%d\n\tauto_https off\n%s}\n\nhttp://127.0.0.1:%d {\n%s\n}\n",
		adminPort, global, port, cfg.Site)

	dir := t.TempDir()
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(caddyfile), 0o600); err != nil {
		t.Fatalf("writing Caddyfile: %v", err)
	}

	cmd := exec.Command(caddyBin, "run", "--config", path, "--adapter", "caddyfile")
	p := &caddyProc{
		URL:      fmt.Sprintf("http://127.0.0.1:%d", port),
		AdminURL: fmt.Sprintf("http://127.0.0.1:%d", adminPort),
		Log:      &redistest.SyncBuffer{},
		cmd:      cmd,
	}
	cmd.Dir = dir
	// Keep Caddy's autosave and storage out of the real home directory.
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
	cmd.Stdout, cmd.Stderr = p.Log, p.Log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting caddy: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	// Cleanups run last-in first-out: kill first, then print the full log.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Caddyfile of %s:\n%s\ncaddy log:\n%s", p.URL, caddyfile, p.Log.String())
		}
	})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	p.waitReady(t, port, adminPort, exited)
	return p
}

// waitReady polls until the admin API answers and the site port accepts
// connections. It does not send requests to the site, which would count
// against its limits.
func (p *caddyProc) waitReady(t *testing.T, port, adminPort int, exited <-chan error) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	var lastErr error
	for deadline := time.Now().Add(readyTimeout); time.Now().Before(deadline); {
		select {
		case err := <-exited:
			t.Fatalf("caddy exited before it was ready: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := client.Get(p.AdminURL + "/config/")
		if err != nil {
			lastErr = err
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			lastErr = fmt.Errorf("admin /config/: status %d", resp.StatusCode)
			continue
		}
		conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err != nil {
			lastErr = err
			continue
		}
		conn.Close()
		return
	}
	t.Fatalf("caddy not ready after %v: %v", readyTimeout, lastErr)
}

// newClient returns an HTTP client that keeps up to conns idle connections
// per host, so a burst does not pay for new connections.
func newClient(conns int) *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns:        conns * 4,
			MaxIdleConnsPerHost: conns,
		},
	}
}

// response is the part of an HTTP response the tests look at.
type response struct {
	Status int
	Header http.Header
	Body   string
}

// get sends GET url with the given headers (name, value pairs) and reads the
// whole response.
func get(t *testing.T, client *http.Client, url string, headers ...string) response {
	t.Helper()
	resp, err := doGet(client, url, headers...)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func doGet(client *http.Client, url string, headers ...string) (response, error) {
	if len(headers)%2 != 0 {
		return response{}, errors.New("headers must be name, value pairs")
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return response{}, err
	}
	for i := 0; i < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, fmt.Errorf("reading body of GET %s: %w", url, err)
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: string(body)}, nil
}

// redisBlock is a `redis { ... }` block for srv with extra lines.
func redisBlock(srv *redistest.Server, extra ...string) string {
	var b strings.Builder
	b.WriteString("\t\tredis {\n\t\t\turl " + srv.URL() + "\n")
	for _, line := range extra {
		b.WriteString("\t\t\t" + line + "\n")
	}
	b.WriteString("\t\t}\n")
	return b.String()
}

// exactRedis is redisBlock for a test that counts statuses exactly, with
// what it needs on a busy machine: a generous timeout, so that a slow
// answer from Redis is still Redis's decision, and failure_mode closed, so
// that a failed one is a 503 the test sees, never a silent admission. It
// goes where redisBlock goes, in the rate_limit block (which must set no
// failure_mode of its own).
func exactRedis(srv *redistest.Server, extra ...string) string {
	return redisBlock(srv, append([]string{"timeout 5s"}, extra...)...) + "\t\tfailure_mode closed\n"
}

// statuses sends n sequential requests and returns their status codes.
func statuses(t *testing.T, client *http.Client, url string, n int, headers ...string) []int {
	t.Helper()
	got := make([]int, n)
	for i := range got {
		got[i] = get(t, client, url, headers...).Status
	}
	return got
}

// wantStatuses builds the status sequence "ok times 200, then rejected
// times code".
func wantStatuses(ok, rejected, code int) []int {
	want := make([]int, 0, ok+rejected)
	for range ok {
		want = append(want, http.StatusOK)
	}
	for range rejected {
		want = append(want, code)
	}
	return want
}

// limitProbe says what waitLimiting waits for: at url, one attempt on a
// fresh key (header, X-Key by default, set to prefix and the attempt's
// number) gets the statuses want, and, when keys is set, adds exactly one
// to the keys it counts in Redis (so a fallback in memory, or a key written
// to the wrong node, does not pass for limiting). what names the probe in
// messages.
type limitProbe struct {
	what, url, header, prefix string
	want                      []int
	keys                      func() (int64, error)
	within                    time.Duration
}

// limitPoll is the pause between two attempts of a limitProbe.
const limitPoll = 20 * time.Millisecond

// waitLimiting polls p, a fresh key per attempt, until it holds, and
// returns how long that took and the attempts made; it fails t when p does
// not hold within p.within.
func waitLimiting(t *testing.T, client *http.Client, p limitProbe) (time.Duration, int) {
	t.Helper()
	header := cmp.Or(p.header, "X-Key")
	start := time.Now()
	var got []int
	var added int64
	for attempt := 1; time.Since(start) < p.within; attempt++ {
		var before, after int64
		var errBefore, errAfter error
		if p.keys != nil {
			before, errBefore = p.keys()
		}
		got = statuses(t, client, p.url, len(p.want), header, p.prefix+strconv.Itoa(attempt))
		if p.keys != nil {
			after, errAfter = p.keys()
		}
		added = after - before
		if errBefore == nil && errAfter == nil && slices.Equal(got, p.want) && (p.keys == nil || added == 1) {
			took := time.Since(start)
			t.Logf("%s: limiting works after %v (%d attempts)", p.what, took.Round(time.Millisecond), attempt)
			return took, attempt
		}
		time.Sleep(limitPoll)
	}
	if p.keys == nil {
		t.Fatalf("%s: limiting did not work within %v: last attempt got statuses %v, want %v", p.what, p.within, got, p.want)
	}
	t.Fatalf("%s: limiting did not work within %v: last attempt got statuses %v (want %v), Redis keys added %d (want 1)",
		p.what, p.within, got, p.want, added)
	return 0, 0
}

// limitKeys counts rdb's keys but the top offenders' sets (key_prefix +
// "top:{<zone>:<minute>}"), which each Caddy writes every few seconds once
// a zone has denied: the keys of the limits themselves.
func limitKeys(ctx context.Context, rdb *redis.Client) (int64, error) {
	n, err := rdb.DBSize(ctx).Result()
	if err != nil {
		return 0, err
	}
	top, err := rdb.Keys(ctx, "*top:{*").Result()
	return n - int64(len(top)), err
}
