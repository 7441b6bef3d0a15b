package sluice

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// TestLazyProblemMatchesBody: the placeholder value a rejection sets reads
// as the body problem_details would send, for every mix of zones.
func TestLazyProblemMatchesBody(t *testing.T) {
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 10, Window: time.Minute}
	zone := func(name string) *Zone { return &Zone{name: name, limit: limit, policy: policyMember(name, limit)} }
	deny, allow := algorithms.Decision{}, algorithms.Decision{Allowed: true}
	five := []*Zone{zone("a"), zone("b"), zone("c"), zone("d"), zone("e")}
	tests := []struct {
		name  string
		zones []*Zone
		reqs  []algorithms.Request
		ds    []algorithms.Decision
		retry time.Duration
	}{
		{"one zone", five[:1], make([]algorithms.Request, 1), []algorithms.Decision{deny}, 3 * time.Second},
		{"allowed and dry-run left out", five[:3], []algorithms.Request{{}, {DryRun: true}, {}}, []algorithms.Decision{allow, deny, deny}, time.Minute},
		{"four denying", five[:4], make([]algorithms.Request, 4), []algorithms.Decision{deny, deny, deny, deny}, time.Second},
		{"five denying: built at once", five, make([]algorithms.Request, 5), []algorithms.Decision{deny, deny, deny, deny, deny}, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			value := newLazyProblem(http.StatusTooManyRequests, &verdict{zones: tt.zones, reqs: tt.reqs, ds: tt.ds}, tt.retry)
			want := problemBody(http.StatusTooManyRequests, &verdict{zones: tt.zones, reqs: tt.reqs, ds: tt.ds}, tt.retry)
			for range 2 { // built once, read twice
				if got := caddy.ToString(value); got != want {
					t.Errorf("placeholder = %s, want %s", got, want)
				}
			}
		})
	}
}

// TestRejectionError: a rejection's HandlerError has what caddyhttp.Error
// would give it: the status, the error, a 9-character ID, and a trace
// naming reject.
func TestRejectionError(t *testing.T) {
	cause := errors.New("rate limit exceeded in zone api")
	ids := map[string]bool{}
	for range 20 {
		he := rejectionError(http.StatusTooManyRequests, cause)
		if he.StatusCode != http.StatusTooManyRequests || !errors.Is(he, cause) {
			t.Fatalf("got status %d, error %v, want 429 wrapping %v", he.StatusCode, he.Err, cause)
		}
		if len(he.ID) != errorIDLen || strings.Trim(he.ID, errorIDAlphabet) != "" {
			t.Fatalf("ID %q, want %d characters of %q", he.ID, errorIDLen, errorIDAlphabet)
		}
		ids[he.ID] = true
		if !strings.HasPrefix(he.Trace, "caddy-sluice.(*Handler).reject (reject.go:") {
			t.Fatalf("trace %q, want caddy-sluice.(*Handler).reject (reject.go:<line>)", he.Trace)
		}
	}
	if len(ids) < 2 {
		t.Errorf("%d distinct IDs in 20 rejections, want them random", len(ids))
	}
}

// TestExpandOnePlaceholder: a key of one placeholder expands exactly as
// Replacer.ReplaceAll expands it; other templates take ReplaceAll itself.
func TestExpandOnePlaceholder(t *testing.T) {
	tests := []struct {
		key     string
		keyVar  string // what singlePlaceholder must find
		want    string
		comment string
	}{
		{"{http.request.header.X-Key}", "http.request.header.X-Key", "tenant-1", "header"},
		{"{http.request.header.X-Missing}", "http.request.header.X-Missing", "", "empty header"},
		{"{no.such.placeholder}", "no.such.placeholder", "", "unknown"},
		{"{http.request.method}", "http.request.method", "GET", "method"},
		{"k:{http.request.header.X-Key}", "", "k:tenant-1", "not alone"},
		{"{http.request.method}{http.request.header.X-Key}", "", "GETtenant-1", "two"},
		{"{a\\}b}", "", "", "escaped brace"},
		{"{file./nonexistent}", "", "", "file"},
		{"plain", "", "plain", "no placeholder"},
	}
	req := httptest.NewRequest(http.MethodGet, "http://example.com/", nil)
	req.Header.Set("X-Key", "tenant-1")
	repl := caddy.NewReplacer()
	req = caddyhttp.PrepareRequest(req, repl, httptest.NewRecorder(), nil)
	for _, tt := range tests {
		t.Run(tt.comment, func(t *testing.T) {
			if got := singlePlaceholder(tt.key); got != tt.keyVar {
				t.Errorf("singlePlaceholder(%q) = %q, want %q", tt.key, got, tt.keyVar)
			}
			z := &Zone{Key: tt.key, keyVar: singlePlaceholder(tt.key)}
			got, want := z.expand(repl), repl.ReplaceAll(tt.key, "")
			if got != want {
				t.Errorf("expand(%q) = %q, want ReplaceAll's %q", tt.key, got, want)
			}
			if tt.keyVar != "" && got != tt.want {
				t.Errorf("expand(%q) = %q, want %q", tt.key, got, tt.want)
			}
		})
	}
}

// TestMatchKeysShareOneString: every zone's request gets the store key
// storeKey gives it, though match builds them in one buffer.
func TestMatchKeysShareOneString(t *testing.T) {
	h := newHandler(t, rateLimit(
		zoneCfg(uniqueZone("a"), "key {http.request.header.X-Key}", "events 10", "window 1m"),
		zoneCfg(uniqueZone("b"), "key {http.request.method}-{http.request.header.X-Key}", "algorithm token_bucket", "events 10", "window 1m"),
		zoneCfg(uniqueZone("c"), "key {http.request.header.X-Other}", "events 10", "window 1m"),
	))
	req, _ := benchRequest("tenant-7", "192.0.2.7")
	repl := req.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	v, err := h.match(req, repl)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(v.reqs), 3; got != want {
		t.Fatalf("%d requests, want %d", got, want)
	}
	for i, z := range v.zones {
		if got, want := v.reqs[i].Key, z.storeKey(repl.ReplaceAll(z.Key, "")); got != want {
			t.Errorf("zone %s: key %q, want %q", z.name, got, want)
		}
	}
}
