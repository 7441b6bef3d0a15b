package sluice

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

// The tests here check what the CLI sends and prints, against a stand-in
// for the admin API; integration_test/cli_test.go runs it against Caddy.

// sentRequest is what the stand-in admin API saw of a request.
type sentRequest struct {
	Method, Path, Query, Body, Origin, ContentType string
}

// fakeAdmin answers every request with status and body, and records it;
// it marks its answers as the admin API does (adminMarkHeader) unless
// foreign.
type fakeAdmin struct {
	status  int
	body    string
	foreign bool

	mu   sync.Mutex
	sent []sentRequest
}

func (f *fakeAdmin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.sent = append(f.sent, sentRequest{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery,
		Body: string(body), Origin: r.Header.Get("Origin"), ContentType: r.Header.Get("Content-Type")})
	f.mu.Unlock()
	if f.status >= 400 {
		w.Header().Set("Content-Type", "application/json")
	}
	if !f.foreign {
		w.Header().Set(adminMarkHeader, adminMarkValue)
	}
	w.WriteHeader(f.status)
	_, _ = io.WriteString(w, f.body)
}

func (f *fakeAdmin) requests() []sentRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sentRequest(nil), f.sent...)
}

// startFakeAdmin serves f on loopback and returns its address (host:port).
func startFakeAdmin(t *testing.T, f *fakeAdmin) string {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// runCLI runs `caddy rate-limit args...` in this process and returns what
// it printed and its error (non-nil: the command exits with status 1).
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := &cobra.Command{Use: "rate-limit", SilenceUsage: true, SilenceErrors: true}
	rateLimitCommand(cmd)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

const zonesJSON = `[{"name":"api","algorithm":"sliding_window","events":100,"window":60,"burst":100,"backend":"redis","healthy":true,"server":"valkey 8.1.1","functions":true,"ban":3600,"overrides":true,"quota_lease":0.25},` +
	`{"name":"quota","algorithm":"fixed_window","events":100000,"window":2592000,"burst":100000,"backend":"redis","healthy":false,"server":"redis 6.0.20","functions":false,"period":"month","time_zone":"Europe/Paris","quota_lease":0},` +
	`{"name":"local","algorithm":"token_bucket","events":5,"window":1.5,"burst":10,"backend":"memory","healthy":true,"quota_lease":0},` +
	`{"name":"shed","algorithm":"adaptive","events":500,"window":0,"burst":500,"backend":"memory","healthy":true,"quota_lease":0,"adaptive":{"limit":42,"in_flight":17,"baseline_seconds":0.031}}]`

func TestCLIRequestsAndOutput(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		status  int
		reply   string
		want    sentRequest // Origin and ContentType are checked apart
		wantOut string
	}{
		{
			name: "zones", args: []string{"zones"}, status: 200, reply: zonesJSON,
			want: sentRequest{Method: "GET", Path: "/rate_limit/zones"},
			wantOut: "" +
				"ZONE   ALGORITHM       EVENTS  WINDOW                BURST  BACKEND                          HEALTHY  OPTIONS\n" +
				"api    sliding_window  100     1m                    -      redis (valkey 8.1.1, functions)  yes      ban 1h, overrides, quota_lease 250ms\n" +
				"quota  fixed_window    100000  month (Europe/Paris)  -      redis (redis 6.0.20, evalsha)    NO       -\n" +
				"local  token_bucket    5       1.5s                  10     memory                           yes      -\n" +
				"shed   adaptive        500     -                     -      memory                           yes      limit 42, in flight 17, baseline 31ms\n",
		},
		{
			name: "zones none", args: []string{"zones"}, status: 200, reply: "[]\n",
			want:    sentRequest{Method: "GET", Path: "/rate_limit/zones"},
			wantOut: "no zones in force (no rate_limit handler in the config)\n",
		},
		{
			name: "zones json as is", args: []string{"zones", "--json"}, status: 200, reply: zonesJSON,
			want:    sentRequest{Method: "GET", Path: "/rate_limit/zones"},
			wantOut: zonesJSON + "\n",
		},
		{
			name: "get escapes the key", args: []string{"get", "api", "10.0.0.0/8 x"}, status: 200,
			reply: `{"zone":"api","limit":100,"remaining":42,"reset_seconds":18}`,
			want:  sentRequest{Method: "GET", Path: "/rate_limit/zones/api/keys/10.0.0.0%2F8%20x"},
			wantOut: "" +
				"zone           api\n" +
				"key            10.0.0.0/8 x\n" +
				"limit          100\n" +
				"remaining      42\n" +
				"full again in  18s\n",
		},
		{
			name: "get a banned key with an override", args: []string{"get", "login", "bob"}, status: 200,
			reply: `{"zone":"login","limit":5,"remaining":0,"reset_seconds":600,"banned_seconds":3540,"override":true}`,
			want:  sentRequest{Method: "GET", Path: "/rate_limit/zones/login/keys/bob"},
			wantOut: "" +
				"zone           login\n" +
				"key            bob\n" +
				"limit          5 (override)\n" +
				"remaining      0\n" +
				"full again in  10m\n" +
				"banned         for 59m\n",
		},
		{
			name: "get a concurrency key, not banned", args: []string{"get", "conc", "k"}, status: 200,
			reply: `{"zone":"conc","limit":10,"remaining":7,"reset_seconds":0,"in_use":3,"banned_seconds":0}`,
			want:  sentRequest{Method: "GET", Path: "/rate_limit/zones/conc/keys/k"},
			wantOut: "" +
				"zone           conc\n" +
				"key            k\n" +
				"limit          10\n" +
				"remaining      7\n" +
				"full again in  0s\n" +
				"in use         3\n" +
				"banned         no\n",
		},
		{
			name: "get a key with units in quota leases", args: []string{"get", "api", "hot"}, status: 200,
			reply: `{"zone":"api","limit":100,"remaining":20,"reset_seconds":60,"leased":30}`,
			want:  sentRequest{Method: "GET", Path: "/rate_limit/zones/api/keys/hot"},
			wantOut: "" +
				"zone           api\n" +
				"key            hot\n" +
				"limit          100\n" +
				"remaining      20\n" +
				"full again in  1m\n" +
				"leased         30\n",
		},
		{
			name: "get the empty key", args: []string{"get", "api", ""}, status: 200,
			reply: `{"zone":"api","limit":1,"remaining":1,"reset_seconds":0}`,
			want:  sentRequest{Method: "GET", Path: "/rate_limit/zones/api/keys/"},
			wantOut: "" +
				"zone           api\n" +
				"key            \"\"\n" +
				"limit          1\n" +
				"remaining      1\n" +
				"full again in  0s\n",
		},
		{
			name: "reset dot segments", args: []string{"reset", "..", "."}, status: 204,
			want:    sentRequest{Method: "DELETE", Path: "/rate_limit/zones/%2E%2E/keys/%2E"},
			wantOut: "key \".\" of zone \"..\" starts over\n",
		},
		{
			name: "get json as is", args: []string{"--json", "get", "api", "k"}, status: 200,
			reply:   `{"zone":"api","limit":100,"remaining":42,"reset_seconds":18,"future":"kept"}` + "\n",
			want:    sentRequest{Method: "GET", Path: "/rate_limit/zones/api/keys/k"},
			wantOut: `{"zone":"api","limit":100,"remaining":42,"reset_seconds":18,"future":"kept"}` + "\n",
		},
		{
			name: "reset", args: []string{"reset", "api", "a/b"}, status: 204,
			want:    sentRequest{Method: "DELETE", Path: "/rate_limit/zones/api/keys/a%2Fb"},
			wantOut: "key \"a/b\" of zone \"api\" starts over\n",
		},
		{
			name: "reset json prints nothing", args: []string{"reset", "api", "k", "--json"}, status: 204,
			want: sentRequest{Method: "DELETE", Path: "/rate_limit/zones/api/keys/k"},
		},
		{
			name: "limit with burst and expiry", args: []string{"limit", "api", "k", "500", "--burst", "1000", "--expires", "1d"}, status: 204,
			want:    sentRequest{Method: "PUT", Path: "/rate_limit/zones/api/keys/k/limit", Body: `{"events":500,"burst":1000,"expires_in":"24h0m0s"}`},
			wantOut: "key \"k\" of zone \"api\" is limited to 500 events (burst 1000) for 1d\n",
		},
		{
			name: "limit events only", args: []string{"limit", "api", "k", "7"}, status: 204,
			want:    sentRequest{Method: "PUT", Path: "/rate_limit/zones/api/keys/k/limit", Body: `{"events":7}`},
			wantOut: "key \"k\" of zone \"api\" is limited to 7 events\n",
		},
		{
			name: "limit clear", args: []string{"limit", "api", "k", "--clear"}, status: 204,
			want:    sentRequest{Method: "DELETE", Path: "/rate_limit/zones/api/keys/k/limit"},
			wantOut: "key \"k\" of zone \"api\" has the zone's limit again\n",
		},
		{
			name: "top", args: []string{"top", "api"}, status: 200,
			reply: `[{"key":"3q2+7w","denied":1234},{"key":"f00d","denied":7}]`,
			want:  sentRequest{Method: "GET", Path: "/rate_limit/zones/api/top", Query: "n=10"},
			wantOut: "" +
				"RANK  KEY     DENIED\n" +
				"1     3q2+7w  1234\n" +
				"2     f00d    7\n",
		},
		{
			name: "top n, escaped zone", args: []string{"top", "my zone", "-n", "3"}, status: 200, reply: `[]`,
			want:    sentRequest{Method: "GET", Path: "/rate_limit/zones/my%20zone/top", Query: "n=3"},
			wantOut: "zone \"my zone\" denied no key in the last 5 minutes\n",
		},
		{
			name: "overrides", args: []string{"overrides", "api"}, status: 200,
			reply: `{"zone":"api","overrides":[{"key_hash":"3q2+7wAAAAAAAAAAAAAAAA","key":"acme","events":1000,"burst":1500,"expires_in_seconds":86400},` +
				`{"key_hash":"f00dAAAAAAAAAAAAAAAAAA","events":5,"burst":5}],"next":"f00dAAAAAAAAAAAAAAAAAA"}`,
			want: sentRequest{Method: "GET", Path: "/rate_limit/zones/api/overrides", Query: "n=100"},
			wantOut: "" +
				"HASH                    KEY   EVENTS  BURST  EXPIRES IN\n" +
				"3q2+7wAAAAAAAAAAAAAAAA  acme  1000    1500   1d\n" +
				"f00dAAAAAAAAAAAAAAAAAA  -     5       5      never\n" +
				"more: caddy rate-limit overrides api --after f00dAAAAAAAAAAAAAAAAAA\n",
		},
		{
			name: "overrides of a zone without burst, hashes only, a later page", args: []string{"overrides", "my zone", "-n", "2", "--after", "3q2+7w/AAAAAAAAAAAAAAA"}, status: 200,
			reply: `{"zone":"my zone","overrides":[{"key_hash":"f00dAAAAAAAAAAAAAAAAAA","events":5,"expires_in_seconds":90}]}`,
			want:  sentRequest{Method: "GET", Path: "/rate_limit/zones/my%20zone/overrides", Query: "n=2&after=3q2%2B7w%2FAAAAAAAAAAAAAAA"},
			wantOut: "" +
				"HASH                    EVENTS  EXPIRES IN\n" +
				"f00dAAAAAAAAAAAAAAAAAA  5       1m30s\n",
		},
		{
			name: "overrides none", args: []string{"overrides", "api"}, status: 200, reply: `{"zone":"api","overrides":[]}`,
			want:    sentRequest{Method: "GET", Path: "/rate_limit/zones/api/overrides", Query: "n=100"},
			wantOut: "zone \"api\": no key has an override\n",
		},
		{
			name: "overrides none after", args: []string{"overrides", "api", "--after", "x"}, status: 200, reply: `{"zone":"api","overrides":[]}`,
			want:    sentRequest{Method: "GET", Path: "/rate_limit/zones/api/overrides", Query: "n=100&after=x"},
			wantOut: "zone \"api\": no more overrides\n",
		},
		{
			name: "overrides json as is", args: []string{"overrides", "api", "--json"}, status: 200,
			reply:   `{"zone":"api","overrides":[{"key_hash":"f00d","events":5}],"future":1}` + "\n",
			want:    sentRequest{Method: "GET", Path: "/rate_limit/zones/api/overrides", Query: "n=100"},
			wantOut: `{"zone":"api","overrides":[{"key_hash":"f00d","events":5}],"future":1}` + "\n",
		},
		{
			name: "top json as is", args: []string{"top", "api", "--count", "1", "--json"}, status: 200,
			reply:   `[{"key":"3q2+7w","denied":1234}]`,
			want:    sentRequest{Method: "GET", Path: "/rate_limit/zones/api/top", Query: "n=1"},
			wantOut: `[{"key":"3q2+7w","denied":1234}]` + "\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			admin := &fakeAdmin{status: tt.status, body: tt.reply}
			addr := startFakeAdmin(t, admin)
			out, err := runCLI(t, append(tt.args, "--address", addr)...)
			if err != nil {
				t.Fatalf("error %v, want none", err)
			}
			sent := admin.requests()
			if len(sent) != 1 {
				t.Fatalf("sent %d requests, want 1", len(sent))
			}
			got := sent[0]
			if wantOrigin := "http://" + addr; got.Origin != wantOrigin {
				t.Errorf("Origin %q, want %q (as caddycmd.AdminAPIRequest sends)", got.Origin, wantOrigin)
			}
			if wantType := map[bool]string{true: "application/json"}[tt.want.Body != ""]; got.ContentType != wantType {
				t.Errorf("Content-Type %q, want %q", got.ContentType, wantType)
			}
			got.Origin, got.ContentType = "", ""
			if got != tt.want {
				t.Errorf("sent %+v, want %+v", got, tt.want)
			}
			if out != tt.wantOut {
				t.Errorf("printed:\n%s\nwant:\n%s", out, tt.wantOut)
			}
		})
	}
}

// TestCLIRejectsBadArguments checks that bad arguments fail before any
// request is sent.
func TestCLIRejectsBadArguments(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		wantInErr string
	}{
		{name: "events zero", args: []string{"limit", "api", "k", "0"}, wantInErr: `events "0"`},
		{name: "events not a number", args: []string{"limit", "api", "k", "lots"}, wantInErr: `events "lots"`},
		{name: "events too large", args: []string{"limit", "api", "k", "1000000001"}, wantInErr: "from 1 to 1000000000"},
		{name: "no events", args: []string{"limit", "api", "k", "--burst", "5"}, wantInErr: "limit takes a zone, a key and events"},
		{name: "bad burst", args: []string{"limit", "api", "k", "5", "--burst", "0"}, wantInErr: "--burst 0"},
		{name: "bad expiry", args: []string{"limit", "api", "k", "5", "--expires", "soon"}, wantInErr: `--expires "soon"`},
		{name: "negative expiry", args: []string{"limit", "api", "k", "5", "--expires", "-1h"}, wantInErr: `--expires "-1h"`},
		{name: "expiry too long", args: []string{"limit", "api", "k", "5", "--expires", "367d"}, wantInErr: `--expires "367d": want a positive duration up to 366d`},
		{name: "clear with events", args: []string{"limit", "api", "k", "5", "--clear"}, wantInErr: "--clear takes a zone and a key only"},
		{name: "clear with expiry", args: []string{"limit", "api", "k", "--clear", "--expires", "1h"}, wantInErr: "--clear takes a zone and a key only"},
		{name: "limit of the empty key", args: []string{"limit", "api", "", "5"}, wantInErr: "the empty key has no limit path"},
		{name: "top zero", args: []string{"top", "api", "-n", "0"}, wantInErr: "-n 0"},
		{name: "overrides zero", args: []string{"overrides", "api", "-n", "0"}, wantInErr: "-n 0: want a whole number from 1 to 1000"},
		{name: "overrides too many", args: []string{"overrides", "api", "-n", "1001"}, wantInErr: "-n 1001"},
		{name: "overrides without zone", args: []string{"overrides"}, wantInErr: "accepts 1 arg(s)"},
		{name: "get without key", args: []string{"get", "api"}, wantInErr: "accepts 2 arg(s)"},
		{name: "zones with an argument", args: []string{"zones", "api"}, wantInErr: "unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			admin := &fakeAdmin{status: 204}
			_, err := runCLI(t, append(tt.args, "--address", startFakeAdmin(t, admin))...)
			if err == nil || !strings.Contains(err.Error(), tt.wantInErr) {
				t.Errorf("error %v, want one containing %q", err, tt.wantInErr)
			}
			if n := len(admin.requests()); n != 0 {
				t.Errorf("sent %d requests, want none", n)
			}
		})
	}
}

func TestCLIRegistered(t *testing.T) {
	cmd, ok := caddycmd.Commands()["rate-limit"]
	if !ok {
		t.Fatal("no rate-limit command registered")
	}
	root := &cobra.Command{Use: "rate-limit"}
	cmd.CobraFunc(root)
	var verbs []string
	for _, c := range root.Commands() {
		verbs = append(verbs, c.Name())
	}
	if got, want := strings.Join(verbs, " "), "get limit overrides reset top zones"; got != want {
		t.Errorf("verbs %q, want %q", got, want)
	}
}
