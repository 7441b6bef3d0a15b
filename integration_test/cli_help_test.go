package integration_test

import (
	"strings"
	"testing"
)

// TestCLIHelpPointsAtSluice: `caddy rate-limit --help`, and each verb's,
// end with Sluice's documentation, not Caddy's generic command-line page.
func TestCLIHelpPointsAtSluice(t *testing.T) {
	const docs = "https://github.com/sluicehq/caddy-sluice/blob/main/docs/operations.md#admin-api"
	for _, args := range [][]string{{"--help"}, {"get", "--help"}, {"limit", "--help"}, {"top", "--help"}, {"overrides", "--help"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			res := rateLimitCLI(t, args...)
			out := res.Stdout + res.Stderr
			if res.Code != 0 {
				t.Fatalf("exit %d, want 0\n%s", res.Code, out)
			}
			if !strings.Contains(out, docs) {
				t.Errorf("help does not name %s\n%s", docs, out)
			}
			if strings.Contains(out, "caddyserver.com/docs/command-line") {
				t.Errorf("help points at Caddy's command-line page\n%s", out)
			}
		})
	}
}
