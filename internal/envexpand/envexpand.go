// Package envexpand expands {env.NAME} placeholders, and nothing else, in
// configuration values such as secrets and passwords: Caddy's replacer
// would also rewrite any other {…} in them (to "" when unknown), which
// silently changes a secret that happens to contain braces.
package envexpand

import (
	"os"
	"strings"
)

const open, close = "{env.", "}"

// Expand returns s with every {env.NAME} replaced by the value of the
// environment variable NAME ("" when unset); other braces stay as written.
func Expand(s string) string {
	if !strings.Contains(s, open) {
		return s
	}
	var b strings.Builder
	for {
		before, rest, found := strings.Cut(s, open)
		b.WriteString(before)
		if !found {
			return b.String()
		}
		name, after, closed := strings.Cut(rest, close)
		if !closed {
			b.WriteString(open + rest)
			return b.String()
		}
		b.WriteString(os.Getenv(name))
		s = after
	}
}
