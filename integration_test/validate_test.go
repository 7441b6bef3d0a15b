package integration_test

import (
	"fmt"
	"strings"
	"testing"
)

// caddyValidate runs `caddy validate` on a Caddyfile with site, which
// provisions every module without serving, and returns its output; the
// Caddyfile's path is "Caddyfile" in the output's file:line.
func caddyValidate(t *testing.T, site string) (string, error) {
	t.Helper()
	return caddyValidateFile(t, "{\n\tadmin off\n\tauto_https off\n}\n\nhttp://127.0.0.1:1 {\n"+site+"}\n")
}

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
			out, err := caddyValidate(t, agreeSite(tt.a, tt.b))
			if tt.want == nil {
				if err != nil {
					t.Errorf("caddy validate: got %v, want success\n%s", err, out)
				}
				return
			}
			if err == nil {
				t.Fatalf("caddy validate: got success, want a failure naming %q\n%s", tt.want, agreeSite(tt.a, tt.b))
			}
			for _, want := range tt.want {
				if !strings.Contains(out, want) {
					t.Errorf("caddy validate output does not contain %q:\n%s", want, out)
				}
			}
		})
	}
}

// TestMaxDelayBounded: `caddy validate` accepts max_delay up to 1m and
// fails past it, naming the option with the Caddyfile's file:line.
func TestMaxDelayBounded(t *testing.T) {
	site := func(maxDelay string) string {
		return `	rate_limit {
		zone shaped {
			key static
			algorithm token_bucket
			events 10
			window 1s
			max_delay ` + maxDelay + `
		}
	}
	respond "ok" 200
`
	}
	tests := []struct {
		maxDelay string
		want     []string // in caddy's output; nil: validates
	}{
		{"1m", nil},
		{"61s", []string{"Caddyfile:13", "zone shaped", "max_delay", "at most 1m0s"}},
		{"8760h", []string{"Caddyfile:13", "zone shaped", "max_delay", "at most 1m0s"}},
	}
	for _, tt := range tests {
		t.Run(tt.maxDelay, func(t *testing.T) {
			out, err := caddyValidate(t, site(tt.maxDelay))
			if tt.want == nil {
				if err != nil {
					t.Errorf("caddy validate: got %v, want success\n%s", err, out)
				}
				return
			}
			if err == nil {
				t.Fatalf("caddy validate: got success, want a failure naming %q", tt.want)
			}
			for _, want := range tt.want {
				if !strings.Contains(out, want) {
					t.Errorf("caddy validate output does not contain %q:\n%s", want, out)
				}
			}
		})
	}
}
