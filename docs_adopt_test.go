package sluice_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// read is the file at path, failing the test if it cannot be read.
func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section is the text of README's section titled title, up to the next
// heading of any level.
func section(t *testing.T, doc, title string) string {
	t.Helper()
	_, after, ok := strings.Cut(doc, title+"\n")
	if !ok {
		t.Fatalf("no section %q", title)
	}
	if i := strings.Index(after, "\n#"); i >= 0 {
		after = after[:i]
	}
	return after
}

// sluiceBuild is an xcaddy build of Sluice: --with the module, and what
// follows it (a version or a replacement).
var sluiceBuild = regexp.MustCompile(`--with github\.com/sluicehq/caddy-sluice(\S*)`)

// TestDocsBuildFromAClone: no tag of Sluice exists, so every xcaddy line
// of the README and docs builds the checkout (=.), not a version that
// cannot be fetched, with the proxy setting that lets Go use it
// (scripts/xcaddy-check.sh runs that build).
func TestDocsBuildFromAClone(t *testing.T) {
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, path := range append([]string{"README.md"}, docs...) {
		for _, line := range strings.Split(read(t, path), "\n") {
			m := sluiceBuild.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			seen++
			if m[1] != "=." {
				t.Errorf("%s: %q builds %q: no version is tagged; build the clone with =.", path, line, m[1])
			}
			if !strings.Contains(line, "|off") {
				t.Errorf("%s: %q: without GOPROXY=…|off, Go asks the proxy for the unpublished module and stops at its 403", path, line)
			}
		}
	}
	if seen == 0 {
		t.Error("no xcaddy build line of Sluice in the README or docs")
	}
	if got := read(t, "scripts/xcaddy-check.sh"); !strings.Contains(got, "--with github.com/sluicehq/caddy-sluice=.") || !strings.Contains(got, "|off") {
		t.Error("scripts/xcaddy-check.sh no longer runs the build the README shows")
	}
}

// TestDocsCopyrightHolder: the license names who holds the copyright,
// in NOTICE and in the README's license section.
func TestDocsCopyrightHolder(t *testing.T) {
	const holder = "The Sluice authors"
	if !strings.Contains(read(t, "NOTICE"), "Copyright 2026 "+holder) {
		t.Errorf("NOTICE does not name the copyright holder %q", holder)
	}
	license := section(t, read(t, "README.md"), "## License")
	for _, want := range []string{holder, "Apache License", "LICENSE", "NOTICE"} {
		if !strings.Contains(license, want) {
			t.Errorf("README's License section lacks %q:\n%s", want, license)
		}
	}
}

// TestDocsExactWhileRedisAnswers: the README says when "exact" holds
// (while Redis answers within timeout) and what each failure_mode does
// otherwise.
func TestDocsExactWhileRedisAnswers(t *testing.T) {
	text := section(t, read(t, "README.md"), "### Exact while Redis answers")
	flat := strings.Join(strings.Fields(text), " ")
	for _, want := range []string{
		"while Redis answers each decision within the `redis` block's `timeout`** (default `100ms`)",
		"`failure_mode`",
		"`open` (the default): the request is admitted, uncounted",
		"`closed`: the request is refused with 503",
		"`local`: the request is limited by this instance's own in-memory counters",
		"N instances admit up to N times it",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("README's exactness section lacks %q:\n%s", want, text)
		}
	}
}

// TestDocsCompatibilityListsMholtOptions: docs/compatibility.md names
// every option of mholt/caddy-ratelimit's Caddyfile and JSON, newest
// included, and the README says how to move ports.
func TestDocsCompatibilityListsMholtOptions(t *testing.T) {
	doc := read(t, "docs/compatibility.md")
	for _, option := range []string{
		"zone <name>", "rate_limits.<name>", "match", "key", "window", "events", "max_events",
		"ipv4_prefix", "ipv6_prefix", "log_key", "jitter", "disable_metrics",
		"distributed { read_interval, write_interval, purge_age }", "storage", "sweep_interval",
	} {
		if !strings.Contains(doc, "`"+option) {
			t.Errorf("docs/compatibility.md does not list caddy-ratelimit's %s", option)
		}
	}
	config := read(t, "docs/configuration.md")
	for _, want := range []string{"| `disable_metrics` | `disable_metrics`", "`\"off\"`", "0 to 32 bits; 0"} {
		if !strings.Contains(config, want) {
			t.Errorf("docs/configuration.md lacks %q", want)
		}
	}
	if readme := read(t, "README.md"); !strings.Contains(readme, "make run HTTP_PORT=8081 ADMIN_PORT=2020") {
		t.Error("the README does not show how to move make run's ports")
	}
}
