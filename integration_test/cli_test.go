package integration_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// cliResult is what one `caddy rate-limit` run printed and how it exited.
type cliResult struct {
	Stdout, Stderr string
	Code           int
}

// rateLimitCLI runs `caddy rate-limit args...` with the built binary.
func rateLimitCLI(t *testing.T, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(caddyBin, append([]string{"rate-limit"}, args...)...)
	dir := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := cliResult{Stdout: stdout.String(), Stderr: stderr.String()}
	if exitErr, ok := errors.AsType[*exec.ExitError](err); ok {
		res.Code = exitErr.ExitCode()
	} else if err != nil {
		t.Fatalf("running caddy rate-limit %v: %v", args, err)
	}
	return res
}

// TestCLIAgainstCaddy lists zones, reads a key after some requests, resets
// it and reads it again with the CLI, on the embedded store; and checks
// that an unknown zone and an admin API that does not answer exit non-zero
// with a message that says so.
func TestCLIAgainstCaddy(t *testing.T) {
	caddy := startCaddy(t, caddyConfig{Site: `	rate_limit {
		zone cli_api {
			key {http.request.header.X-Key}
			algorithm fixed_window
			events 5
			window 1h
		}
	}
	respond "ok" 200`})
	admin := strings.TrimPrefix(caddy.AdminURL, "http://")
	const key = "tenant/1" // a slash: the key must travel as one path segment
	client := newClient(1)
	for range 3 {
		get(t, client, caddy.URL+"/", "X-Key", key)
	}

	t.Run("zones", func(t *testing.T) {
		res := rateLimitCLI(t, "zones", "--address", admin)
		lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
		if res.Code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "ZONE") ||
			strings.Join(strings.Fields(lines[1]), " ") != "cli_api fixed_window 5 1h - memory yes -" {
			t.Errorf("exit %d, printed:\n%s\nstderr: %s\nwant exit 0 and a header and the line of cli_api", res.Code, res.Stdout, res.Stderr)
		}
	})

	remaining := func(t *testing.T) int64 {
		t.Helper()
		res := rateLimitCLI(t, "get", "cli_api", key, "--address", admin, "--json")
		var state struct {
			Zone      string `json:"zone"`
			Limit     int64  `json:"limit"`
			Remaining int64  `json:"remaining"`
		}
		if err := json.Unmarshal([]byte(res.Stdout), &state); res.Code != 0 || err != nil {
			t.Fatalf("get --json: exit %d, printed %q (%v), stderr: %s", res.Code, res.Stdout, err, res.Stderr)
		}
		if state.Zone != "cli_api" || state.Limit != 5 {
			t.Errorf("get --json: zone %q limit %d, want cli_api and 5", state.Zone, state.Limit)
		}
		return state.Remaining
	}
	if got, want := remaining(t), int64(2); got != want {
		t.Errorf("remaining after 3 requests: got %d, want %d", got, want)
	}
	res := rateLimitCLI(t, "get", "cli_api", key, "--address", admin)
	if res.Code != 0 || !strings.Contains(res.Stdout, "remaining      2\n") {
		t.Errorf("get: exit %d, printed:\n%s\nwant exit 0 and a line \"remaining      2\"", res.Code, res.Stdout)
	}

	res = rateLimitCLI(t, "reset", "cli_api", key, "--address", admin)
	if res.Code != 0 || res.Stdout != `key "tenant/1" of zone "cli_api" starts over`+"\n" {
		t.Errorf("reset: exit %d, printed %q, stderr: %s", res.Code, res.Stdout, res.Stderr)
	}
	if got, want := remaining(t), int64(5); got != want {
		t.Errorf("remaining after reset: got %d, want %d", got, want)
	}

	t.Run("unknown_zone", func(t *testing.T) {
		res := rateLimitCLI(t, "get", "nope", key, "--address", admin)
		if res.Code == 0 || !strings.Contains(res.Stderr, "unknown zone") || !strings.Contains(res.Stderr, "HTTP 404") || res.Stdout != "" {
			t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant a non-zero exit and \"unknown zone\" on stderr", res.Code, res.Stdout, res.Stderr)
		}
	})

	t.Run("unreachable", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := ln.Addr().String()
		ln.Close()
		res := rateLimitCLI(t, "zones", "--address", closed)
		if res.Code == 0 || !strings.Contains(res.Stderr, "did not answer") {
			t.Errorf("exit %d, stderr:\n%s\nwant a non-zero exit and \"did not answer\"", res.Code, res.Stderr)
		}
	})
}

// TestCLIAgainstASite: pointed at a site that answers 200 "ok" to every
// request, not at the admin API, every verb fails (exit 1) and prints
// nothing on stdout.
func TestCLIAgainstASite(t *testing.T) {
	caddy := startCaddy(t, caddyConfig{Site: `	respond "ok" 200`})
	site := strings.TrimPrefix(caddy.URL, "http://")
	for _, args := range [][]string{
		{"zones"}, {"get", "api", "k"}, {"--json", "get", "api", "k"}, {"reset", "api", "k"},
		{"limit", "api", "k", "5"}, {"limit", "api", "k", "--clear"}, {"top", "api"},
	} {
		res := rateLimitCLI(t, append(args, "--address", site)...)
		if res.Code != 1 || res.Stdout != "" || !strings.Contains(res.Stderr, "not Caddy's admin API") {
			t.Errorf("%v: exit %d, stdout %q, stderr %s; want exit 1, nothing printed, and why", args, res.Code, res.Stdout, res.Stderr)
		}
	}
}
