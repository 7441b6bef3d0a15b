package sluice

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
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

// TestCaddyfileMaxDelay: max_delay parses to the zone's JSON and limit.
func TestCaddyfileMaxDelay(t *testing.T) {
	h, err := parse(t, zoneBlock("key k", "algorithm token_bucket", "events 10", "window 1s", "burst 1", "max_delay 500ms"))
	if err != nil {
		t.Fatalf("UnmarshalCaddyfile: %v", err)
	}
	if got, want := toJSON(t, h), `"max_delay":500000000`; !strings.Contains(got, want) {
		t.Errorf("JSON %s does not contain %s", got, want)
	}
	z := h.Zones["z"]
	if err := z.setup("z"); err != nil {
		t.Fatal(err)
	}
	if got, want := z.limit.MaxDelay, 500*time.Millisecond; got != want {
		t.Errorf("limit's max_delay: got %v, want %v", got, want)
	}
}

// TestCaddyfileMaxDelayErrors: a bad max_delay fails with the option named
// and the file:line.
func TestCaddyfileMaxDelayErrors(t *testing.T) {
	tb := []string{"key k", "algorithm token_bucket", "events 10", "window 1s"}
	with := func(lines ...string) string { return zoneBlock(append(append([]string{}, tb...), lines...)...) }
	tests := []struct {
		name  string
		input string
		want  []string
		line  int
	}{
		{"on the default algorithm", zoneBlock("key k", "events 10", "window 1s", "max_delay 1s"), []string{"zone z", "max_delay", "token_bucket"}, 7},
		{"on fixed_window", zoneBlock("key k", "algorithm fixed_window", "events 10", "window 1s", "max_delay 1s"), []string{"zone z", "max_delay", "token_bucket"}, 8},
		{"on concurrency", zoneBlock("key k", "algorithm concurrency", "events 10", "max_delay 1s"), []string{"zone z", "max_delay", "token_bucket"}, 7},
		{"zero", with("max_delay 0"), []string{"max_delay", "0"}, 7},
		{"negative", with("max_delay -1s"), []string{"max_delay", "-1s"}, 7},
		{"garbage", with("max_delay soon"), []string{"max_delay", "soon"}, 7},
		{"missing value", with("max_delay"), []string{"max_delay", "missing value"}, 7},
		{"too many values", with("max_delay 1s 2s"), []string{"max_delay", "too many values"}, 7},
		{"repeated", with("max_delay 1s", "max_delay 2s"), []string{"max_delay"}, 8},
		{"too long", with("max_delay 400d"), []string{"zone z", "max_delay"}, 7},
		{"too many waiting events", zoneBlock("key k", "algorithm token_bucket", "events 1000000000", "window 1ms", "max_delay 1m"), []string{"zone z", "max_delay"}, 8},
		{"longer than 1m", with("max_delay 61s"), []string{"zone z", "max_delay", "at most 1m0s", "1m1s"}, 7},
		{"a year", with("max_delay 8760h"), []string{"zone z", "max_delay", "at most 1m0s"}, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantParseError(t, tt.input, tt.want, tt.line) })
	}
}

// TestCaddyfileLimitErrors: the bounds on events, burst and cost fail
// parsing with the option named and the file:line.
func TestCaddyfileLimitErrors(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  []string // substrings of the error, the option's name first
		line  int
	}{
		{"events above 10^9", zoneBlock("key k", "events 1000000001", "window 1m"), []string{"events", "1000000000"}, 4},
		{"events 2^52", zoneBlock("key k", "events 4503599627370496", "window 1m"), []string{"events", "1000000000"}, 4},
		{"burst above 10^9", zoneBlock("key k", "algorithm token_bucket", "events 10", "window 1m", "burst 1000000001"), []string{"burst", "1000000000"}, 7},
		// the zone is checked as a whole once its block ends; an error that
		// names an option points at its line
		{"sliding_log above 10,000", zoneBlock("key k", "algorithm sliding_log", "events 10001", "window 1m"), []string{"events", "10000", "sliding_window"}, 5},
		{"sliding_log before the algorithm", zoneBlock("key k", "events 10001", "window 1m", "algorithm sliding_log"), []string{"events", "10000", "sliding_window"}, 4},
		{"static cost above int64", zoneBlock("key k", "events 10", "window 1m", "cost 99999999999999999999"), []string{"cost", "exceeds"}, 7},
		{"static cost above capacity", zoneBlock("key k", "algorithm token_bucket", "events 10", "burst 20", "window 1m", "cost 21"), []string{"cost", "exceeds"}, 9},
		// a required option missing is named, at the zone's end
		{"key missing", zoneBlock("events 10", "window 1m"), []string{"zone z", "key missing"}, 5},
		{"window missing", zoneBlock("key k", "events 10"), []string{"zone z", "window missing"}, 5},
		{"events and window missing", zoneBlock("key k"), []string{"zone z", "events, window missing"}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantParseError(t, tt.input, tt.want, tt.line) })
	}
}

// TestCaddyfileLargeLimits: daily, monthly and yearly plans and 10^9 a
// minute parse and validate on every algorithm that takes them.
func TestCaddyfileLargeLimits(t *testing.T) {
	tests := []struct{ algorithm, events, window, burst string }{
		{"sliding_window", "100000", "24h", ""},
		{"token_bucket", "100000", "24h", ""},
		{"fixed_window", "5000000", "720h", ""},
		{"sliding_window", "5000000", "720h", ""},
		{"token_bucket", "1000000000", "1m", ""},
		{"sliding_window", "999999937", "8784h", ""},
		{"token_bucket", "999999937", "8784h", "1000000000"},
		{"token_bucket", "1", "1ms", "1000000000"},
		{"sliding_log", "10000", "8784h", ""},
	}
	for _, tt := range tests {
		lines := []string{"key k", "algorithm " + tt.algorithm, "events " + tt.events, "window " + tt.window}
		if tt.burst != "" {
			lines = append(lines, "burst "+tt.burst)
		}
		if _, err := parse(t, zoneBlock(lines...)); err != nil {
			t.Errorf("%s events %s window %s burst %q: got %v, want no error", tt.algorithm, tt.events, tt.window, tt.burst, err)
		}
	}
}

func TestUnmarshalSettleOptions(t *testing.T) {
	tests := []struct {
		name         string
		input        string
		countStatus  []string
		costFromResp string
		algorithm    string
	}{
		{"count_status codes and classes", settleZone("key k", "events 5", "window 1m", "count_status 401 403 5xx"),
			[]string{"401", "403", "5xx"}, "", ""},
		{"cost_from_response", settleZone("key k", "events 100000", "window 1h", "cost 500", "cost_from_response {http.response.header.X-Usage-Tokens}"),
			nil, "{http.response.header.X-Usage-Tokens}", ""},
		{"concurrency without window", settleZone("key k", "algorithm concurrency", "events 10"),
			nil, "", "concurrency"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := new(Handler)
			if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tt.input)); err != nil {
				t.Fatal(err)
			}
			z := h.Zones["z"]
			if !slices.Equal(z.CountStatus, tt.countStatus) || z.CostFromResponse != tt.costFromResp || z.Algorithm != tt.algorithm {
				t.Errorf("got count_status %v, cost_from_response %q, algorithm %q; want %v, %q, %q",
					z.CountStatus, z.CostFromResponse, z.Algorithm, tt.countStatus, tt.costFromResp, tt.algorithm)
			}
		})
	}
}

func TestUnmarshalSettleOptionErrors(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  []string // substrings of the error; the first names the option
		line  int
	}{
		{"count_status missing value", settleZone("key k", "events 5", "window 1m", "count_status"), []string{"count_status", "missing value"}, 6},
		{"count_status code too high", settleZone("key k", "events 5", "window 1m", "count_status 401 600"), []string{"count_status", "600"}, 6},
		{"count_status code too low", settleZone("key k", "events 5", "window 1m", "count_status 99"), []string{"count_status", "99"}, 6},
		{"count_status class 6xx", settleZone("key k", "events 5", "window 1m", "count_status 6xx"), []string{"count_status", "6xx"}, 6},
		{"count_status word", settleZone("key k", "events 5", "window 1m", "count_status failed"), []string{"count_status", "failed"}, 6},
		{"count_status repeated", settleZone("key k", "events 5", "window 1m", "count_status 401", "count_status 403"), []string{"count_status", "more than once"}, 7},
		{"cost_from_response missing value", settleZone("key k", "events 5", "window 1m", "cost_from_response"), []string{"cost_from_response", "missing value"}, 6},
		{"cost_from_response not a placeholder", settleZone("key k", "events 5", "window 1m", "cost_from_response tokens"), []string{"cost_from_response", "placeholder"}, 6},
		{"concurrency with cost", settleZone("key k", "algorithm concurrency", "events 5", "cost 2"), []string{"cost", "concurrency"}, 6},
		{"concurrency with count_status", settleZone("key k", "algorithm concurrency", "events 5", "count_status 401"), []string{"count_status", "concurrency"}, 6},
		{"concurrency with cost_from_response", settleZone("key k", "algorithm concurrency", "events 5", "cost_from_response {x}"), []string{"cost_from_response", "concurrency"}, 6},
		{"concurrency with burst", settleZone("key k", "algorithm concurrency", "events 5", "burst 6"), []string{"burst"}, 6},
		{"unknown algorithm names concurrency", settleZone("key k", "algorithm inflight", "events 5"), []string{"algorithm", "concurrency"}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantParseError(t, tt.input, tt.want, tt.line) })
	}
}

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

// FuzzUnmarshalCaddyfile: no input, however malformed, panics the parser.
func FuzzUnmarshalCaddyfile(f *testing.F) {
	f.Add(rateLimit(zoneCfg("api", "key {client_ip}", "events 10", "window 1m")))
	f.Add(rateLimit(block("redis", "url redis://x", "tls insecure_skip_verify"), block("jwt", "from header X", "secret s")))
	f.Add(rateLimit(block("distributed", "read_interval 1s"), block("storage file_system", "root /x")))
	f.Add(rateLimit(zoneCfg("z", block("match", "path /a"), "cost {http.request.header.C}")))
	f.Fuzz(func(t *testing.T, input string) {
		// Tokenize, not NewTestDispenser: that one exits the process on
		// input the lexer refuses (a bad heredoc marker), which the
		// adapter reports as an error before any directive sees it.
		tokens, err := caddyfile.Tokenize([]byte(input), "Fuzzfile")
		if err != nil {
			t.Skip()
		}
		var h Handler
		_ = h.UnmarshalCaddyfile(caddyfile.NewDispenser(tokens))
	})
}
