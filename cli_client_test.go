package sluice

import (
	"encoding/json"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCLIAdminErrors(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		status    int
		reply     string
		wantInErr []string
	}{
		{
			name: "unknown zone", args: []string{"get", "nope", "k"},
			status: 404, reply: `{"error":"unknown zone \"nope\""}`,
			wantInErr: []string{`reading key "k" of zone "nope"`, `unknown zone "nope"`, "HTTP 404"},
		},
		{
			name: "unknown zone, top", args: []string{"top", "nope"},
			status: 404, reply: `{"error":"unknown zone \"nope\""}`,
			wantInErr: []string{`zone "nope"`, `unknown zone "nope"`, "HTTP 404"},
		},
		{
			name: "no rate_limit routes", args: []string{"zones"},
			status: 404, reply: "404 page not found\n",
			wantInErr: []string{"listing zones", "404 page not found", "is the rate_limit handler in this Caddy's config?", "HTTP 404"},
		},
		{
			name: "zone without overrides", args: []string{"limit", "api", "k", "5"},
			status: 409, reply: `{"error":"zone \"api\" has no \"overrides\": add it to set a key's limit"}`,
			wantInErr: []string{`setting the limit of key "k" in zone "api"`, `zone "api" has no "overrides"`, "HTTP 409"},
		},
		{
			name: "conflict without a message", args: []string{"limit", "api", "k", "--clear"},
			status:    409,
			wantInErr: []string{"Conflict", "the zone needs the overrides option", "HTTP 409"},
		},
		{
			name: "store down", args: []string{"reset", "api", "k"},
			status: 502, reply: `{"error":"redis: connection refused"}`,
			wantInErr: []string{`resetting key "k" of zone "api"`, "redis: connection refused", "HTTP 502"},
		},
		{
			name: "a redirect is not followed", args: []string{"get", "api", "k"},
			status:    301,
			wantInErr: []string{"redirected", "not followed", "HTTP 301"},
		},
		{
			name: "an endpoint this Caddy lacks", args: []string{"top", "api"},
			status: 404, reply: `{"error":"not found: want /rate_limit/zones or /rate_limit/zones/<zone>/keys/<key>"}`,
			wantInErr: []string{"not found: want", "may be older than this command", "HTTP 404"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			admin := &fakeAdmin{status: tt.status, body: tt.reply}
			out, err := runCLI(t, append(tt.args, "--address", startFakeAdmin(t, admin))...)
			if err == nil {
				t.Fatalf("no error (printed %q), want one", out)
			}
			for _, want := range tt.wantInErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q, want it to contain %q", err, want)
				}
			}
			if out != "" {
				t.Errorf("printed %q on error, want nothing", out)
			}
			if n := len(admin.requests()); n != 1 {
				t.Errorf("sent %d requests, want 1", n)
			}
		})
	}
}

func TestCLIUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now

	_, err = runCLI(t, "zones", "--address", addr)
	for _, want := range []string{"listing zones", "admin API at " + addr + " did not answer", "is Caddy running?"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want one containing %q", err, want)
		}
	}
}

func TestCLIAddressFromConfig(t *testing.T) {
	admin := &fakeAdmin{status: 200, body: "[]"}
	addr := startFakeAdmin(t, admin)
	config, _ := json.Marshal(map[string]any{"admin": map[string]any{"listen": addr}})
	path := filepath.Join(t.TempDir(), "caddy.json")
	if err := os.WriteFile(path, config, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, "zones", "--config", path); err != nil {
		t.Fatalf("error %v, want none", err)
	}
	if n := len(admin.requests()); n != 1 {
		t.Errorf("the admin listener of --config got %d requests, want 1", n)
	}
}

func TestCLIUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Skipf("no unix sockets here: %v", err)
	}
	admin := &fakeAdmin{status: 200, body: "[]"}
	srv := httptest.NewUnstartedServer(admin)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	for _, addr := range []string{"unix/" + sock, "unix/" + sock + "|0220"} {
		if _, err := runCLI(t, "zones", "--address", addr); err != nil {
			t.Errorf("--address %s: error %v, want none", addr, err)
		}
	}
	if n := len(admin.requests()); n != 2 {
		t.Errorf("the socket got %d requests, want 2", n)
	}
}

func TestCLIBadAddress(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:2019-2020", "fd/3", "::nonsense::"} {
		if _, err := runCLI(t, "zones", "--address", addr); err == nil || !strings.Contains(err.Error(), "admin address") {
			t.Errorf("--address %s: error %v, want one about the admin address", addr, err)
		}
	}
}

// TestCLIForeignAnswer: an answer without the admin API's mark, or not of
// its shape, is no success, whatever its status.
func TestCLIForeignAnswer(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		admin     *fakeAdmin
		wantInErr string
	}{
		{name: "zones from a site", args: []string{"zones"}, admin: &fakeAdmin{status: 200, body: "[]", foreign: true}, wantInErr: "not Caddy's admin API"},
		{name: "get from a site", args: []string{"get", "api", "k"}, admin: &fakeAdmin{status: 200, body: "ok", foreign: true}, wantInErr: "not Caddy's admin API"},
		{name: "get --json from a site", args: []string{"--json", "get", "api", "k"}, admin: &fakeAdmin{status: 200, body: "ok", foreign: true}, wantInErr: "not Caddy's admin API"},
		{name: "reset from a site", args: []string{"reset", "api", "k"}, admin: &fakeAdmin{status: 200, body: "ok", foreign: true}, wantInErr: "not Caddy's admin API"},
		{name: "reset 204 from a site", args: []string{"reset", "api", "k"}, admin: &fakeAdmin{status: 204, foreign: true}, wantInErr: "not Caddy's admin API"},
		{name: "limit from a site", args: []string{"limit", "api", "k", "5"}, admin: &fakeAdmin{status: 200, body: "ok", foreign: true}, wantInErr: "not Caddy's admin API"},
		{name: "limit --clear from a site", args: []string{"limit", "api", "k", "--clear"}, admin: &fakeAdmin{status: 200, body: "ok", foreign: true}, wantInErr: "not Caddy's admin API"},
		{name: "top from a site", args: []string{"top", "api"}, admin: &fakeAdmin{status: 200, body: "ok", foreign: true}, wantInErr: "not Caddy's admin API"},
		{name: "get --json, not JSON", args: []string{"--json", "get", "api", "k"}, admin: &fakeAdmin{status: 200, body: "ok"}, wantInErr: "decoding the admin API's answer"},
		{name: "zones --json, not a list", args: []string{"--json", "zones"}, admin: &fakeAdmin{status: 200, body: `{"a":1}`}, wantInErr: "decoding the admin API's answer"},
		{name: "reset, not a reset", args: []string{"reset", "api", "k"}, admin: &fakeAdmin{status: 200, body: `{"ok":true}`}, wantInErr: "not a change made"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := runCLI(t, append(tt.args, "--address", startFakeAdmin(t, tt.admin))...)
			if err == nil || !strings.Contains(err.Error(), tt.wantInErr) {
				t.Errorf("error %v, want one containing %q", err, tt.wantInErr)
			}
			if out != "" {
				t.Errorf("printed %q, want nothing", out)
			}
		})
	}
}

// TestCLIResetWarning: a reset, or a limit set or cleared, done but not
// told to the other instances (200 with a warning) is a success that
// prints the warning.
func TestCLIResetWarning(t *testing.T) {
	const reply = `{"reset":true,"warning":"reset, but not announced: NOPERM"}` + "\n"
	for _, tt := range []struct {
		args    []string
		wantOut string
	}{
		{[]string{"reset", "api", "k"}, "key \"k\" of zone \"api\" starts over\nwarning: reset, but not announced: NOPERM\n"},
		{[]string{"reset", "api", "k", "--json"}, reply},
		{[]string{"limit", "api", "k", "5"}, "key \"k\" of zone \"api\" is limited to 5 events\nwarning: reset, but not announced: NOPERM\n"},
		{[]string{"limit", "api", "k", "--clear"}, "key \"k\" of zone \"api\" has the zone's limit again\nwarning: reset, but not announced: NOPERM\n"},
	} {
		admin := &fakeAdmin{status: 200, body: reply}
		out, err := runCLI(t, append(tt.args, "--address", startFakeAdmin(t, admin))...)
		if err != nil {
			t.Errorf("%v: error %v, want none", tt.args, err)
		}
		if out != tt.wantOut {
			t.Errorf("%v: printed %q, want %q", tt.args, out, tt.wantOut)
		}
	}
}
