package envexpand

import "testing"

func TestExpand(t *testing.T) {
	t.Setenv("SLUICE_ENVEXPAND", "v")
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"{env.SLUICE_ENVEXPAND}", "v"},
		{"a{b}c{env.SLUICE_ENVEXPAND}d", "a{b}cvd"},
		{"{http.request.host}", "{http.request.host}"},
		{"{env.SLUICE_ENVEXPAND_UNSET}x", "x"},
		{"x{env.SLUICE_ENVEXPAND", "x{env.SLUICE_ENVEXPAND"},
		{"{}{env.SLUICE_ENVEXPAND}{env.SLUICE_ENVEXPAND}", "{}vv"},
	}
	for _, tt := range tests {
		if got := Expand(tt.in); got != tt.want {
			t.Errorf("Expand(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
}
