package integration_test

import (
	"fmt"
	"strings"
	"testing"
)

// TestAdaptiveBadConfig: `caddy validate` refuses an adaptive zone's bad
// settings, and options that do not apply to one, naming the option with
// the Caddyfile's file:line; a zone with every option right validates.
func TestAdaptiveBadConfig(t *testing.T) {
	withoutRedis(t)
	// the zone's lines start at line 9 of the Caddyfile caddyValidate
	// writes: key on 9, algorithm on 10, events on 11, extra from 12
	site := func(algorithm, events, extra string) string {
		return fmt.Sprintf(`	rate_limit {
		zone up {
			key static
			algorithm %s
			%s
%s		}
	}
	respond "ok" 200
`, algorithm, events, extra)
	}
	block := func(lines ...string) string {
		return "\t\t\tadaptive {\n\t\t\t\t" + strings.Join(lines, "\n\t\t\t\t") + "\n\t\t\t}\n"
	}
	line := func(s string) string { return "\t\t\t" + s + "\n" }
	tests := []struct {
		name      string
		algorithm string // adaptive unless set
		events    string // "events 10" unless set
		extra     string
		want      []string // in caddy's output; nil: validates
	}{
		{name: "defaults"},
		{name: "every option", extra: block("min 2", "initial 5", "tolerance 1.2") +
			line("priority {http.request.header.X-Class} critical normal bulk") + line("reserve 90%") +
			line("status 429") + line("max_delay 100ms") + line("dry_run")},
		{name: "min over events", extra: block("min 11"), want: []string{"Caddyfile:13", "min"}},
		{name: "initial over events", extra: block("initial 11"), want: []string{"Caddyfile:13", "initial"}},
		{name: "initial under min", extra: block("min 5", "initial 4"), want: []string{"Caddyfile:14", "initial"}},
		{name: "tolerance 1", extra: block("tolerance 1"), want: []string{"Caddyfile:13", "tolerance"}},
		{name: "tolerance under 1", extra: block("tolerance 0.5"), want: []string{"Caddyfile:13", "tolerance"}},
		{name: "reserve over 90%", extra: line("reserve 95%"), want: []string{"Caddyfile:12", "reserve"}},
		{name: "reserve under 0%", extra: line("reserve -5%"), want: []string{"Caddyfile:12", "reserve"}},
		{name: "priority without classes", extra: line("priority {http.request.header.X-Class}"),
			want: []string{"Caddyfile:12", "priority"}},
		{name: "priority with a class twice", extra: line("priority {http.request.header.X-Class} gold silver gold"),
			want: []string{"Caddyfile:12", "priority", "gold"}},
		{name: "adaptive block on another algorithm", algorithm: "sliding_window", events: "events 10\n\t\t\twindow 1m",
			extra: block("min 2"), want: []string{"Caddyfile:13", "adaptive"}},
		{name: "window", extra: line("window 1m"), want: []string{"Caddyfile:12", "window"}},
		{name: "cost", extra: line("cost 2"), want: []string{"Caddyfile:12", "cost"}},
		{name: "burst", extra: line("burst 5"), want: []string{"Caddyfile:12", "burst"}},
		{name: "period", extra: line("period day"), want: []string{"Caddyfile:12", "period"}},
		{name: "ban", extra: line("ban 1m"), want: []string{"Caddyfile:12", "ban"}},
		{name: "overrides", extra: line("overrides"), want: []string{"Caddyfile:12", "overrides"}},
		{name: "quota_lease", extra: line("quota_lease 5s"), want: []string{"Caddyfile:12", "quota_lease"}},
		{name: "count_status", extra: line("count_status 2xx"), want: []string{"Caddyfile:12", "count_status"}},
		{name: "cost_from_response", extra: line("cost_from_response {http.response.header.X-Cost}"),
			want: []string{"Caddyfile:12", "cost_from_response"}},
		{name: "events placeholder", events: "events {http.request.header.X-Events} 10", want: []string{"Caddyfile:11", "events"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			algorithm, events := cmpOr(tt.algorithm, "adaptive"), cmpOr(tt.events, "events 10")
			s := site(algorithm, events, tt.extra)
			out, err := caddyValidate(t, s)
			if tt.want == nil {
				if err != nil {
					t.Errorf("caddy validate: got %v, want success\n%s\n%s", err, s, out)
				}
				return
			}
			if err == nil {
				t.Fatalf("caddy validate: got success, want a failure naming %q\n%s", tt.want, s)
			}
			for _, want := range tt.want {
				if !strings.Contains(out, want) {
					t.Errorf("caddy validate output does not contain %q:\n%s\nCaddyfile site:\n%s", want, out, s)
				}
			}
		})
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
