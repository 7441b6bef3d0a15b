package jwtclaims

import "testing"

// TestFlattenCollisions: claims that flatten to one path yield one value,
// the same every time: the least nested, then the first by name.
func TestFlattenCollisions(t *testing.T) {
	tests := []struct {
		name   string
		claims map[string]any
		path   string
		want   string
	}{
		{"a literal dotted name beats a nested one", map[string]any{
			"org.id": "literal", "org": map[string]any{"id": "nested"}}, "org.id", "literal"},
		{"the less nested of two nested ones", map[string]any{
			"a": map[string]any{"b.c": "one level"}, "a.b": map[string]any{"c": "one level too"},
			"x": map[string]any{"y": map[string]any{"z": "two levels"}}, "x.y": map[string]any{"z": "one level"}}, "x.y.z", "one level"},
		{"equally nested: the first by name", map[string]any{
			"a": map[string]any{"b.c": "under a"}, "a.b": map[string]any{"c": "under a.b"}}, "a.b.c", "under a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 50 { // map order varies from run to run
				if got := Flatten(tt.claims)[tt.path]; got != tt.want {
					t.Fatalf("Flatten(...)[%q]: got %q, want %q", tt.path, got, tt.want)
				}
			}
		})
	}
}

// TestExpandedKeepsBraces: only {env.*} expands in a secret; other braces
// are part of it.
func TestExpandedKeepsBraces(t *testing.T) {
	t.Setenv("SLUICE_JWT_PART", "env")
	c := Config{Secret: "s{3}cr{et}-{env.SLUICE_JWT_PART}", JWKSURL: "https://{env.SLUICE_JWT_PART}.example/jwks"}.Expanded()
	if got, want := c.Secret, "s{3}cr{et}-env"; got != want {
		t.Errorf("secret: got %q, want %q", got, want)
	}
	if got, want := c.JWKSURL, "https://env.example/jwks"; got != want {
		t.Errorf("jwks_url: got %q, want %q", got, want)
	}
}
