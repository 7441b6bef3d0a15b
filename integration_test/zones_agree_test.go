package integration_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// agreeSite declares zone login in two rate_limit handlers, under /a with
// the lines a and under /b with the lines b, after key and events.
func agreeSite(a, b string) string {
	handler := func(path, lines string) string {
		return fmt.Sprintf(`	handle %s {
		rate_limit {
			zone login {
				key {http.request.header.X-Key}
				events 5
%s			}
		}
		respond "ok" 200
	}
`, path, lines)
	}
	return handler("/a*", a) + handler("/b*", b)
}

// TestZonesOfOneNameAgree: `caddy validate` fails, naming the zone and
// the option, when two handlers declare one zone that counts otherwise in
// each (they would share counters, and one would refund or charge under
// the other's feet); handlers that differ only in what is theirs (key,
// cost) validate.
func TestZonesOfOneNameAgree(t *testing.T) {
	const w = "\t\t\t\twindow 10m\n"
	tests := []struct {
		name string
		a, b string
		want []string // in caddy's output; nil: validates
	}{
		{"alike", w + "\t\t\t\tcount_status 401\n", w + "\t\t\t\tcount_status 401\n", nil},
		{"only cost differs", w + "\t\t\t\tcost 2\n", w, nil},
		{"count_status in one only", w + "\t\t\t\tcount_status 401\n", w,
			[]string{"zone login", "count_status"}},
		{"cost_from_response in one only", w + "\t\t\t\tcost_from_response {http.response.header.X-Tokens}\n", w,
			[]string{"zone login", "cost_from_response"}},
		{"another algorithm", w + "\t\t\t\talgorithm sliding_log\n", w + "\t\t\t\talgorithm fixed_window\n",
			[]string{"zone login", "algorithm"}},
		{"another window", w, "\t\t\t\twindow 1h\n", []string{"zone login", "limit"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "Caddyfile")
			caddyfile := "{\n\tadmin off\n\tauto_https off\n}\n\nhttp://127.0.0.1:1 {\n" + agreeSite(tt.a, tt.b) + "}\n"
			if err := os.WriteFile(path, []byte(caddyfile), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(caddyBin, "validate", "--config", path, "--adapter", "caddyfile")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
			out, err := cmd.CombinedOutput()
			if tt.want == nil {
				if err != nil {
					t.Errorf("caddy validate: got %v, want success\n%s", err, out)
				}
				return
			}
			if err == nil {
				t.Fatalf("caddy validate: got success, want a failure naming %q\n%s", tt.want, caddyfile)
			}
			for _, want := range tt.want {
				if !strings.Contains(string(out), want) {
					t.Errorf("caddy validate output does not contain %q:\n%s", want, out)
				}
			}
		})
	}
}
