package sluice

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// provision parses input as a rate_limit directive and provisions it as
// Caddy does, returning its error.
func provision(t *testing.T, input string) (*Handler, error) {
	t.Helper()
	parsed := new(Handler)
	if err := parsed.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input)); err != nil {
		t.Fatalf("parsing Caddyfile: %v\n%s", err, input)
	}
	raw, err := json.Marshal(parsed)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := testContext(t).LoadModuleByID("http.handlers.rate_limit", raw)
	if err != nil {
		return nil, err
	}
	return mod.(*Handler), nil
}

// documentedRules are the rules of docs/operations.md's ACL line for
// Sluice's user, without its name, "on" and password, as the docs adapt
// them to the server: Redis 6 has no Functions, Redis 6.0 no channel rules.
func documentedRules(t *testing.T) []string {
	t.Helper()
	v := redistest.ServerVersion(t)
	channels := v.Name == "valkey" || v.Major > 6 || (v.Major == 6 && v.Minor >= 2)
	f, err := os.Open("docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[0] != "ACL" || fields[1] != "SETUSER" || fields[2] != "sluice" {
			continue
		}
		var rules []string
		for _, r := range fields[3:] {
			switch {
			case strings.HasPrefix(r, ">"), r == "on":
			case (r == "+fcall" || r == "+function|load") && !v.Functions():
			case (r == "resetchannels" || strings.HasPrefix(r, "&")) && !channels:
			default:
				rules = append(rules, r)
			}
		}
		return rules
	}
	t.Fatal("docs/operations.md has no line ACL SETUSER sluice …")
	return nil
}

// setUser creates user on srv, with password "pw" and rules.
func setUser(t *testing.T, srv *redistest.Server, user string, rules ...string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">pw"}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := srv.Client(t).Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s: %v", user, err)
	}
}

// without is rules less the rule drop.
func without(rules []string, drop string) []string {
	return slices.DeleteFunc(slices.Clone(rules), func(r string) bool { return r == drop })
}

// hasDryRun reports whether the server has ACL DRYRUN: Redis 7, Valkey.
func hasDryRun(t *testing.T) bool {
	v := redistest.ServerVersion(t)
	return v.Name == "valkey" || v.Major >= 7
}

// TestProvisionRefusedCredentials: when Redis refuses the credentials,
// provisioning fails naming the option to fix (never its value); when it
// does not answer, provisioning succeeds (failure_mode covers it).
func TestProvisionRefusedCredentials(t *testing.T) {
	srv := redistest.Start(t)
	setUser(t, srv, "alice", "~*", "+@all")
	if err := srv.Client(t).ConfigSet(context.Background(), "requirepass", "right-secret").Err(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		redis []string
		want  []string // in the error; none: provisions
	}{
		{"wrong password", []string{"url redis://" + srv.Addr, "password wrong-secret"}, []string{"redis: password:", "WRONGPASS"}},
		{"no password", []string{"url redis://" + srv.Addr}, []string{"redis: password: Redis requires one", "NOAUTH"}},
		{"wrong username or password", []string{"url redis://" + srv.Addr, "username alice", "password wrong-secret"},
			[]string{`redis: username "alice" or password:`, "WRONGPASS"}},
		{"wrong password in the url", []string{"url redis://alice:wrong-secret@" + srv.Addr},
			[]string{`redis: the url's username "alice" or the url's password:`, "WRONGPASS"}},
		{"right password", []string{"url redis://" + srv.Addr, "password right-secret"}, nil},
		{"right user", []string{"url redis://" + srv.Addr, "username alice", "password pw"}, nil},
		{"no Redis", []string{"url redis://" + closedPort(t), "password wrong-secret"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := provision(t, rateLimit(block("redis", tt.redis...), logZone(uniqueZone("auth"), 5, "1m")))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("provision: %v, want success", err)
				}
				if h.Cleanup() != nil {
					t.Error("cleanup failed")
				}
				return
			}
			if err == nil {
				t.Fatal("provision: success, want a failure naming the option")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("provision error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "wrong-secret") {
				t.Errorf("provision error %q shows the password", err)
			}
		})
	}
}

// TestProvisionACL: a user whose ACL refuses a command Sluice sends fails
// provisioning, naming the user and the command, where Redis can say so
// (ACL DRYRUN, which the user may run); a least-privileged user with
// exactly the documented rules provisions, though it may not run ACL
// DRYRUN.
func TestProvisionACL(t *testing.T) {
	if !hasDryRun(t) {
		t.Skipf("%s has no ACL DRYRUN", redistest.ServerVersion(t))
	}
	srv := redistest.Start(t)
	rules := documentedRules(t)
	setUser(t, srv, "sluice", rules...)
	setUser(t, srv, "nozadd", append(without(rules, "+zadd"), "+acl|dryrun")...)
	setUser(t, srv, "nodel", append(without(rules, "+del"), "+acl|dryrun")...)
	setUser(t, srv, "other", append(without(rules, "~sluice:*"), "~other:*", "+acl|dryrun")...)
	tests := []struct {
		user string
		want []string // in the error; none: provisions
	}{
		{"sluice", nil},
		{"nozadd", []string{`redis: username "nozadd"`, "zadd:", "'zadd'"}},
		{"nodel", []string{`redis: username "nodel"`, "del:"}},
		{"other", []string{`redis: username "other"`, "sluice:acl-check"}},
	}
	for _, tt := range tests {
		t.Run(tt.user, func(t *testing.T) {
			h, err := provision(t, rateLimit(block("redis", "url redis://"+srv.Addr, "username "+tt.user, "password pw"),
				logZone(uniqueZone("acl"), 5, "1m")))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("provision as %s: %v, want success", tt.user, err)
				}
				_ = h.Cleanup()
				return
			}
			if err == nil {
				t.Fatalf("provision as %s: success, want a failure naming the permission", tt.user)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("provision error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestAuthCause: a call Redis refuses for the user's ACL (here a script's
// ZADD, which a least-privileged user's provisioning cannot dry-run) is
// the cause auth in the failure log and the error metric, not other.
func TestAuthCause(t *testing.T) {
	srv := redistest.Start(t)
	setUser(t, srv, "nozadd", without(documentedRules(t), "+zadd")...)
	h := newHandler(t, rateLimit(block("redis", "url redis://"+srv.Addr, "username nozadd", "password pw"),
		logZone(uniqueZone("authcause"), 5, "1m")))
	logs := observeFailures(t, h)
	if res := serveNext(t, h, respondWith(http.StatusOK)); res.next != 1 {
		t.Fatalf("request: got %d calls of next, want 1 (failure_mode open; err %v)", res.next, res.err)
	}
	lines := logs.FilterMessage(failureLine).All()
	if len(lines) != 1 {
		t.Fatalf("failure lines: got %d, want 1: %v", len(lines), logs.All())
	}
	if got, want := lines[0].ContextMap()["cause"], authCause; got != want {
		t.Errorf("failure line's cause: got %v, want %v (error %v)", got, want, lines[0].ContextMap()["error"])
	}
	b := h.backend.(*redisBackend)
	if got := testutil.ToFloat64(b.metrics.backendErrors.WithLabelValues(b.label, authCause)); got != 1 {
		t.Errorf("errors of cause %s: got %v, want 1", authCause, got)
	}
}

// TestDryRunCoversDocumentedACL: every command of docs/operations.md's
// ACL line is dry-run at provision, but those the dry run leaves out on
// purpose (the reset channel's, whose lack is a warning, and HELLO), on
// a server with Functions and on one without.
func TestDryRunCoversDocumentedACL(t *testing.T) {
	dryRun := map[string]bool{}
	for _, functions := range []bool{false, true} {
		for _, c := range aclCommands("sluice:k", functions, true) {
			dryRun[commandName(c)] = true
		}
	}
	f, err := os.Open("docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	found := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[0] != "ACL" || fields[1] != "SETUSER" || fields[2] != "sluice" {
			continue
		}
		found = true
		for _, r := range fields[3:] {
			name, ok := strings.CutPrefix(r, "+")
			if !ok || name == "publish" || name == "subscribe" || name == "hello" {
				continue
			}
			if !dryRun[name] {
				t.Errorf("the documented rule %s is not dry-run (aclCommands)", r)
			}
		}
	}
	if !found {
		t.Fatal("docs/operations.md has no line ACL SETUSER sluice …")
	}
}
