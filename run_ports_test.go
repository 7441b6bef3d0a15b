package sluice_test

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestRunPorts: Caddyfile.example reads its ports from HTTP_PORT and
// ADMIN_PORT (8080 and 2019 when unset, the golden files' JSON), and
// `make run HTTP_PORT=… ADMIN_PORT=…` passes them to Caddy.
func TestRunPorts(t *testing.T) {
	t.Setenv("SLUICE_STORE", "memory")
	t.Setenv("HTTP_PORT", "8081")
	t.Setenv("ADMIN_PORT", "2020")
	got := adapt(t, "Caddyfile.example")
	for _, want := range []string{`"listen": "localhost:2020"`, `":8081"`} {
		if !bytes.Contains(got, []byte(want)) {
			t.Errorf("Caddyfile.example with HTTP_PORT=8081 ADMIN_PORT=2020 adapts without %s:\n%s", want, got)
		}
	}
	for _, gone := range []string{"2019", "8080"} {
		if bytes.Contains(got, []byte(gone)) {
			t.Errorf("Caddyfile.example with HTTP_PORT=8081 ADMIN_PORT=2020 still has %s", gone)
		}
	}

	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "HTTP_PORT=8080 ADMIN_PORT=2019 SLUICE_STORE=memory"},
		{[]string{"HTTP_PORT=8081", "ADMIN_PORT=2020"}, "HTTP_PORT=8081 ADMIN_PORT=2020 SLUICE_STORE=memory"},
	} {
		cmd := exec.Command("make", append([]string{"-n", "run"}, tt.args...)...)
		cmd.Env = withoutEnv(os.Environ(), "HTTP_PORT", "ADMIN_PORT", "REDIS_URL")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n run %v: %v\n%s", tt.args, err, out)
		}
		if !strings.Contains(string(out), tt.want) || !strings.Contains(string(out), "--config Caddyfile.example") {
			t.Errorf("make -n run %v:\n%s\nwant it to run Caddyfile.example with %s", tt.args, out, tt.want)
		}
	}
}

// withoutEnv is env without the variables named.
func withoutEnv(env []string, names ...string) []string {
	var kept []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, n := range names {
			drop = drop || name == n
		}
		if !drop {
			kept = append(kept, kv)
		}
	}
	return kept
}
