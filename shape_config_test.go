package sluice

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// TestUnmarshalCaddyfileShape parses problem_details and headers pk, and
// checks that their bad forms fail with the option's name and line.
func TestUnmarshalCaddyfileShape(t *testing.T) {
	good := []struct {
		name    string
		input   string
		problem bool
		headers []string
	}{
		{"problem_details", minimal("problem_details"), true, nil},
		{"headers ietf pk", minimal("headers ietf pk"), false, []string{"ietf", "pk"}},
		{"both", minimal("headers pk ietf legacy", "problem_details"), true, []string{"pk", "ietf", "legacy"}},
	}
	for _, tt := range good {
		t.Run(tt.name, func(t *testing.T) {
			h, err := parse(t, tt.input)
			if err != nil {
				t.Fatal(err)
			}
			if h.ProblemDetails != tt.problem {
				t.Errorf("ProblemDetails = %v, want %v", h.ProblemDetails, tt.problem)
			}
			if !slices.Equal(h.Headers, tt.headers) {
				t.Errorf("Headers = %q, want %q", h.Headers, tt.headers)
			}
		})
	}
	bad := []struct {
		name  string
		input string
		want  []string
		line  int
	}{
		{"problem_details with a value", minimal("problem_details on"), []string{"problem_details", "on"}, 2},
		{"problem_details repeated", minimal("problem_details", "problem_details"), []string{"problem_details", "more than once"}, 3},
		{"pk alone", minimal("headers pk"), []string{"headers", "pk", "ietf"}, 2},
		{"pk without ietf", minimal("headers legacy x pk"), []string{"headers", "pk", "ietf"}, 2},
		{"pk with none", minimal("headers none pk"), []string{"headers", "none"}, 2},
		{"pk misspelt", minimal("headers ietf pkey"), []string{"headers", "pkey"}, 2},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) { wantParseError(t, tt.input, tt.want, tt.line) })
	}
}

// TestValidateJSONShape checks the JSON fields of problem_details and pk
// through caddy.Validate.
func TestValidateJSONShape(t *testing.T) {
	const zone = `"rate_limits": {"z": {"key": "{http.request.remote.host}", "max_events": 10, "window": 60000000000}}`
	tests := []struct {
		name    string
		handler string
		want    []string // substrings of the error; nil: valid
	}{
		{"problem_details", `"problem_details": true, ` + zone, nil},
		{"ietf pk", `"headers": ["ietf", "pk"], ` + zone, nil},
		{"pk without ietf", `"headers": ["legacy", "pk"], ` + zone, []string{"headers", "pk", "ietf"}},
		{"pk alone", `"headers": ["pk"], ` + zone, []string{"headers", "pk", "ietf"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg caddy.Config
			raw := `{"apps": {"http": {"servers": {"s": {"listen": [":0"],
				"routes": [{"handle": [{"handler": "rate_limit", ` + tt.handler + `}]}]}}}}}`
			if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
				t.Fatalf("decoding config: %v\n%s", err, raw)
			}
			err := caddy.Validate(&cfg)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("caddy.Validate: %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("caddy.Validate accepted %s", tt.handler)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
