package sluice_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/sluicehq/caddy-sluice"
)

// adapt adapts the Caddyfile at path to indented JSON, failing on errors
// and warnings.
func adapt(t *testing.T, path string) []byte {
	t.Helper()
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	adapter := caddyconfig.GetAdapter("caddyfile")
	if adapter == nil {
		t.Fatal("no caddyfile adapter registered")
	}
	out, warnings, err := adapter.Adapt(body, map[string]any{"filename": filepath.Base(path)})
	if err != nil {
		t.Fatalf("adapting %s: %v", path, err)
	}
	for _, w := range warnings {
		t.Errorf("adapting %s: warning: %s", path, w.String())
	}
	var indented bytes.Buffer
	if err := json.Indent(&indented, out, "", "\t"); err != nil {
		t.Fatalf("indenting adapted JSON: %v", err)
	}
	indented.WriteByte('\n')
	return indented.Bytes()
}

// golden compares got with the golden file, or rewrites it with -update.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run Adapt -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("adapted JSON differs from %s (go test -run Adapt -update rewrites it):\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

func TestAdaptCaddyfileExample(t *testing.T) {
	tests := []struct {
		name   string
		env    map[string]string // "" unsets
		golden string
	}{
		{
			name:   "memory",
			env:    map[string]string{"SLUICE_STORE": "", "REDIS_URL": "", "HTTP_PORT": "", "ADMIN_PORT": ""},
			golden: "testdata/Caddyfile.example.memory.golden.json",
		},
		{
			name:   "redis",
			env:    map[string]string{"SLUICE_STORE": "redis", "REDIS_URL": "redis://127.0.0.1:6379/0", "HTTP_PORT": "", "ADMIN_PORT": ""},
			golden: "testdata/Caddyfile.example.redis.golden.json",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v) // restores the variable after the test
				if v == "" {
					os.Unsetenv(k)
				}
			}
			got := adapt(t, "Caddyfile.example")
			golden(t, tt.golden, got)
			checkRateLimitHandler(t, got, tt.name == "redis")
			// Provisioning needs no Redis connection: go-redis dials lazily.
			if err := validate(t, got); err != nil {
				t.Errorf("caddy.Validate of the adapted config: %v", err)
			}
		})
	}
}

// TestAdaptAllOptions keeps the JSON of every Caddyfile option in a golden
// file.
func TestAdaptAllOptions(t *testing.T) {
	golden(t, "testdata/all-options.golden.json", adapt(t, "testdata/all-options.Caddyfile"))
}
