package sluice

import (
	"strconv"
	"strings"
	"testing"
)

// The one Caddyfile builder of the package's tests: the parser tests, the
// handler tests, the fuzz seeds and the benchmarks write their rate_limit
// directives with it, line for line, so that a test's line numbers are
// those of the lines it passes.

// block is a Caddyfile block: the head line ending in "{", each line (which
// may itself be a block) indented by one tab, and "}".
func block(head string, lines ...string) string {
	body := strings.ReplaceAll(strings.Join(lines, "\n"), "\n", "\n\t")
	return head + " {\n\t" + body + "\n}"
}

// rateLimit is a rate_limit directive with the given lines, as
// UnmarshalCaddyfile sees it (the matcher already stripped).
func rateLimit(lines ...string) string { return block("rate_limit", lines...) }

// zoneCfg is a zone block with the given lines.
func zoneCfg(name string, lines ...string) string { return block("zone "+name, lines...) }

// logZone is a sliding_log zone keyed by the client's address, with extra
// lines after its limit. sliding_log is exact and does not change with time
// during a test, so the handler tests can count on its remaining.
func logZone(name string, events int, window string, extra ...string) string {
	return zoneCfg(name, append([]string{
		"key {http.request.remote.host}",
		"algorithm sliding_log",
		"events " + strconv.Itoa(events),
		"window " + window,
	}, extra...)...)
}

// minimalZone is the zone that minimal declares; zone1 is what it parses to.
var minimalZone = zoneCfg("z", "key {remote_host}", "events 10", "window 1m")

// minimal is a valid handler with top-level lines added before its zone.
func minimal(lines ...string) string {
	return rateLimit(append(lines, minimalZone)...)
}

// zoneBlock wraps the lines of zone z in a complete handler.
func zoneBlock(lines ...string) string { return rateLimit(zoneCfg("z", lines...)) }

// tinyZone is the body of a valid one-event zone, for the tests that vary
// the zone's name or the directive around it.
var tinyZone = []string{"key k", "events 1", "window 1s"}

// wantParseError checks that input fails to parse with an error that
// contains every string of want and ends with the Caddyfile location of
// line (the Validation rule: the option named, with file:line).
func wantParseError(t *testing.T, input string, want []string, line int) {
	t.Helper()
	h, err := parse(t, input)
	if err == nil {
		t.Fatalf("UnmarshalCaddyfile accepted bad input, parsed as %s", toJSON(t, h))
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not contain %q", msg, w)
		}
	}
	if at := "Testfile:" + strconv.Itoa(line); !strings.HasSuffix(msg, at) {
		t.Errorf("error %q does not end with the location %q", msg, at)
	}
}
