package sluice

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dunglas/httpsfv"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/sluicehq/caddy-sluice/algorithms"
)

// TestHasErrorRoutes: a rejection goes to handle_errors only when the
// request's site has error routes: those of a server whose routes match
// the request (the Caddyfile puts each site's behind its host matcher).
func TestHasErrorRoutes(t *testing.T) {
	siteRoute := caddyhttp.Route{MatcherSets: caddyhttp.MatcherSets{{caddyhttp.MatchHost{"errors.test"}}}}
	tests := []struct {
		name   string
		server *caddyhttp.Server
		host   string
		want   bool
	}{
		{"no server", nil, "a.test", false},
		{"no error routes", &caddyhttp.Server{}, "a.test", false},
		{"another site's error routes", &caddyhttp.Server{Errors: &caddyhttp.HTTPErrorConfig{Routes: caddyhttp.RouteList{siteRoute}}}, "a.test", false},
		{"this site's error routes", &caddyhttp.Server{Errors: &caddyhttp.HTTPErrorConfig{Routes: caddyhttp.RouteList{siteRoute}}}, "errors.test", true},
		{"a route for every site", &caddyhttp.Server{Errors: &caddyhttp.HTTPErrorConfig{Routes: caddyhttp.RouteList{{}}}}, "a.test", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := caddyhttp.PrepareRequest(httptest.NewRequest(http.MethodGet, "http://"+tt.host+"/", nil),
				caddy.NewReplacer(), httptest.NewRecorder(), tt.server)
			if got := hasErrorRoutes(r); got != tt.want {
				t.Errorf("hasErrorRoutes: got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestServeHTTPRejection(t *testing.T) {
	tests := []struct {
		name   string
		status string // status line; "" for the default
		want   int
	}{
		{"default status", "", http.StatusTooManyRequests},
		{"configured status", "status 503", http.StatusServiceUnavailable},
		{"configured 4xx", "status 420", 420},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			zone := uniqueZone("rej")
			h := newHandler(t, rateLimit(tt.status, logZone(zone, 2, "1m")))
			rec := new(eventRecorder)
			if err := h.events.On("rate_limit_exceeded", rec); err != nil {
				t.Fatalf("subscribing to rate_limit_exceeded: %v", err)
			}
			for i := range 2 {
				if res := serve(t, h, reqOpts{}); !res.allowed() {
					t.Fatalf("request %d: err %v; want allowed", i, res.err)
				}
			}
			res := serve(t, h, reqOpts{})
			wantDenied(t, res, tt.want)
			// Retry-After ≤ window + window/events = 90s.
			if got := retryAfter(t, res); got > 90 {
				t.Errorf("Retry-After = %d, want ≤ 90", got)
			}
			if got := res.repl.ReplaceAll("{http.rate_limit.exceeded.name}", ""); got != zone {
				t.Errorf("{http.rate_limit.exceeded.name} = %q, want %q", got, zone)
			}
			// without error routes, the bare status, written here: inside a
			// tracing span, which records what is written within it
			if res.err != nil || res.rec.Body.Len() != 0 || res.rec.Code != tt.want {
				t.Errorf("got err %v, response (%d, %q); want the bare status %d written by the handler", res.err, res.rec.Code, res.rec.Body.String(), tt.want)
			}
			events := rec.forZone(zone)
			if len(events) != 1 {
				t.Fatalf("rate_limit_exceeded events for %s: %d, want 1", zone, len(events))
			}
			if _, ok := events[0]["key"]; ok {
				t.Errorf("event carries the key without log_key: %v", events[0])
			}
			if ra, ok := events[0]["retry_after"].(float64); !ok || ra < 1 {
				t.Errorf("event retry_after = %v, want seconds ≥ 1", events[0]["retry_after"])
			}
		})
	}
}

// quotaExceeded is the problem type of draft-ietf-httpapi-ratelimit-headers,
// spelled out here rather than taken from the code under test.
const quotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// problemMembers are every member a problem body may have.
var problemMembers = []string{"detail", "status", "title", "type", "violated-policies"}

// wantDetail is the detail a rejection by the zones violated, retried
// after seconds, should carry.
func wantDetail(violated []string, seconds int64) string {
	zones := "zone "
	if len(violated) > 1 {
		zones = "zones "
	}
	unit := "seconds"
	if seconds == 1 {
		unit = "second"
	}
	return fmt.Sprintf("Quota exceeded in %s%s; retry in %d %s.", zones, strings.Join(violated, ", "), seconds, unit)
}

// checkProblem parses body as a problem object and checks every member
// against status, the zones violated and Retry-After seconds. policy is
// the RateLimit-Policy field, whose members violated-policies must name.
func checkProblem(t *testing.T, body string, status int, violated []string, seconds int64, policy string) {
	t.Helper()
	var got map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("problem body %q: %v", body, err)
	}
	var members []string
	for k := range got {
		members = append(members, k)
	}
	slices.Sort(members)
	if !slices.Equal(members, problemMembers) {
		t.Errorf("problem members = %v, want %v", members, problemMembers)
	}
	var p struct {
		Type     string   `json:"type"`
		Title    string   `json:"title"`
		Status   int      `json:"status"`
		Detail   string   `json:"detail"`
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("problem body %q: %v", body, err)
	}
	if p.Type != quotaExceeded {
		t.Errorf("type = %q, want %q", p.Type, quotaExceeded)
	}
	if p.Title != "Quota Exceeded" {
		t.Errorf("title = %q, want %q", p.Title, "Quota Exceeded")
	}
	if p.Status != status {
		t.Errorf("status = %d, want %d", p.Status, status)
	}
	if want := wantDetail(violated, seconds); p.Detail != want {
		t.Errorf("detail = %q, want %q", p.Detail, want)
	}
	if !slices.Equal(p.Violated, violated) {
		t.Errorf("violated-policies = %q, want %q", p.Violated, violated)
	}
	policies, err := httpsfv.UnmarshalList([]string{policy})
	if err != nil {
		t.Fatalf("RateLimit-Policy %q: %v", policy, err)
	}
	var names []string
	for _, m := range policies {
		if item, ok := m.(httpsfv.Item); ok {
			names = append(names, fmt.Sprint(item.Value))
		}
	}
	for _, v := range p.Violated {
		if !slices.Contains(names, v) {
			t.Errorf("violated policy %q is not in RateLimit-Policy %q", v, policy)
		}
	}
}

// TestProblemDetails rejects with problem_details on and checks the
// response: status, content type, every member of the body, every header.
func TestProblemDetails(t *testing.T) {
	type zone struct {
		events int
		dryRun bool
	}
	tests := []struct {
		name   string
		status string // the status line; "" for the default
		want   int
		zones  []zone
		denies []int // indexes of the zones that deny the second request
	}{
		{"one zone", "", 429, []zone{{events: 1}}, []int{0}},
		{"one of two denies", "", 429, []zone{{events: 1}, {events: 5}}, []int{0}},
		{"two deny", "", 429, []zone{{events: 1}, {events: 1}}, []int{0, 1}},
		{"dry-run zone is no violated policy", "", 429, []zone{{events: 1}, {events: 1, dryRun: true}}, []int{0}},
		{"status 503", "status 503", 503, []zone{{events: 1}}, []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg strings.Builder
			fmt.Fprintf(&cfg, "rate_limit {\n\tproblem_details\n\t%s\n\theaders ietf legacy x\n", tt.status)
			names := make([]string, len(tt.zones))
			for i, z := range tt.zones {
				names[i] = uniqueZone(fmt.Sprintf("pd%d", i))
				dry := ""
				if z.dryRun {
					dry = "dry_run"
				}
				fmt.Fprintf(&cfg, "\tzone %s {\n\t\tkey {http.request.remote.host}\n\t\talgorithm sliding_log\n\t\tevents %d\n\t\twindow 1m\n\t\t%s\n\t}\n", names[i], z.events, dry)
			}
			h := newHandler(t, cfg.String()+"}")
			if first := serve(t, h, reqOpts{}); !first.allowed() {
				t.Fatalf("first request: err %v, next %d; want allowed", first.err, first.next)
			}
			res := serve(t, h, reqOpts{})
			if res.err != nil || res.next != 0 {
				t.Fatalf("denied request: err %v, next %d; want nil and 0 (the handler answers)", res.err, res.next)
			}
			if res.rec.Code != tt.want {
				t.Errorf("status = %d, want %d", res.rec.Code, tt.want)
			}
			if got := res.header("Content-Type"); got != "application/problem+json" {
				t.Errorf("Content-Type = %q, want application/problem+json", got)
			}
			body := res.rec.Body.String()
			if got := res.header("Content-Length"); got != strconv.Itoa(len(body)) {
				t.Errorf("Content-Length = %q, want %d", got, len(body))
			}
			for _, f := range []string{"RateLimit-Policy", "RateLimit", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
				if res.header(f) == "" {
					t.Errorf("%s missing on a problem response", f)
				}
			}
			var violated []string
			for _, i := range tt.denies {
				violated = append(violated, names[i])
			}
			checkProblem(t, body, tt.want, violated, retryAfter(t, res), res.header("RateLimit-Policy"))
			if strings.Contains(body, "192.0.2.1") {
				t.Errorf("problem body %q leaks the key 192.0.2.1", body)
			}
			if got := res.repl.ReplaceAll("{"+problemPlaceholder+"}", ""); got != body {
				t.Errorf("{%s} = %q, want the body %q", problemPlaceholder, got, body)
			}
		})
	}
}

// TestProblemPlaceholder checks that without problem_details a rejection
// still goes to handle_errors, with the problem JSON in a placeholder.
func TestProblemPlaceholder(t *testing.T) {
	zone := uniqueZone("pdph")
	h := newHandler(t, fmt.Sprintf(`rate_limit {
		zone %s {
			key {http.request.remote.host}
			algorithm sliding_log
			events 1
			window 1m
		}
	}`, zone))
	serve(t, h, reqOpts{})
	res := serve(t, h, reqOpts{})
	wantDenied(t, res, http.StatusTooManyRequests)
	if body := res.rec.Body.String(); body != "" {
		t.Errorf("body = %q, want empty: handle_errors writes it", body)
	}
	if got := res.header("Content-Type"); got != "" {
		t.Errorf("Content-Type = %q, want unset: handle_errors sets it", got)
	}
	problem := res.repl.ReplaceAll("{"+problemPlaceholder+"}", "")
	checkProblem(t, problem, http.StatusTooManyRequests, []string{zone}, retryAfter(t, res), res.header("RateLimit-Policy"))
}

// TestProblemBody checks the body's encoding for edge cases of the detail.
func TestProblemBody(t *testing.T) {
	limit := algorithms.Limit{Algorithm: algorithms.SlidingLog, Events: 10, Window: time.Minute}
	zone := func(name string) *Zone { return headerZone(name, limit) }
	deny := algorithms.Decision{Allowed: false}
	allow := algorithms.Decision{Allowed: true, Remaining: 3}
	tests := []struct {
		name     string
		zones    []*Zone
		reqs     []algorithms.Request
		ds       []algorithms.Decision
		retry    time.Duration
		violated []string
		seconds  int64
	}{
		{"one second", []*Zone{zone("a")}, []algorithms.Request{{}}, []algorithms.Decision{deny}, time.Second, []string{"a"}, 1},
		{"rounded up", []*Zone{zone("a")}, []algorithms.Request{{}}, []algorithms.Decision{deny}, 1500 * time.Millisecond, []string{"a"}, 2},
		{"below a second", []*Zone{zone("a")}, []algorithms.Request{{}}, []algorithms.Decision{deny}, time.Millisecond, []string{"a"}, 1},
		{"names with dot, dash, underscore", []*Zone{zone("a.b-c_d"), zone("z")}, []algorithms.Request{{}, {}}, []algorithms.Decision{deny, deny}, time.Hour, []string{"a.b-c_d", "z"}, 3600},
		{"allowed and dry-run zones left out", []*Zone{zone("a"), zone("b"), zone("c")}, []algorithms.Request{{}, {DryRun: true}, {}}, []algorithms.Decision{allow, deny, deny}, 7 * time.Second, []string{"c"}, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			policies := make([]string, len(tt.zones))
			for i, z := range tt.zones {
				policies[i] = z.policy
			}
			body := problemBody(http.StatusTooManyRequests, &verdict{zones: tt.zones, reqs: tt.reqs, ds: tt.ds}, tt.retry)
			checkProblem(t, body, http.StatusTooManyRequests, tt.violated, tt.seconds, strings.Join(policies, ", "))
		})
	}
}

// caddyHTTP serves h over net/http as Caddy's server would: a prepared
// request, a 200 from next, and a HandlerError's status when h returns one.
// served counts the requests that reached h.
func caddyHTTP(h *Handler, served *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), w, nil)
		if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			caddyhttp.SetVar(r.Context(), caddyhttp.ClientIPVarKey, host)
		}
		next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) error {
			_, err := w.Write([]byte("ok"))
			return err
		})
		if err := h.ServeHTTP(w, r, next); err != nil {
			var he caddyhttp.HandlerError
			if !errors.As(err, &he) {
				he.StatusCode = http.StatusInternalServerError
			}
			w.WriteHeader(he.StatusCode)
		}
	})
}

// TestProblemRetryablehttp checks that a real retrying client,
// hashicorp/go-retryablehttp, honours Retry-After on a problem_details
// rejection: its own backoff is 1ms, so only waiting for Retry-After (1s,
// when the token bucket has a token again) makes its retry pass.
func TestProblemRetryablehttp(t *testing.T) {
	zone := uniqueZone("pdretry")
	h := newHandler(t, fmt.Sprintf(`rate_limit {
		problem_details
		zone %s {
			key {http.request.remote.host}
			algorithm token_bucket
			events 1
			window 1s
		}
	}`, zone))
	var served atomic.Int64
	srv := httptest.NewServer(caddyHTTP(h, &served))
	defer srv.Close()

	client := retryablehttp.NewClient()
	client.Logger = nil
	client.RetryWaitMin, client.RetryWaitMax, client.RetryMax = time.Millisecond, time.Millisecond, 1

	var problem *http.Response
	client.ResponseLogHook = func(_ retryablehttp.Logger, resp *http.Response) {
		if resp.StatusCode == http.StatusTooManyRequests && problem == nil {
			problem = resp
		}
	}
	if resp, err := client.Get(srv.URL); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %v, %v; want 200", resp, err)
	} else {
		resp.Body.Close()
	}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatalf("second request: %v (the retry did not pass: Retry-After ignored?)", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("second request: status %d, want 200 after one retry", resp.StatusCode)
	}
	if got := served.Load(); got != 3 {
		t.Errorf("requests served = %d, want 3 (one, then a 429 and its retry)", got)
	}
	if problem == nil {
		t.Fatal("the client saw no 429")
	}
	if got := problem.Header.Get("Content-Type"); got != "application/problem+json" {
		t.Errorf("429 Content-Type = %q, want application/problem+json", got)
	}
	if got, want := retryablehttp.DefaultBackoff(time.Millisecond, time.Millisecond, 1, problem), time.Second; got != want {
		t.Errorf("retryablehttp backoff on the 429 = %v, want %v (its Retry-After)", got, want)
	}
}

func BenchmarkProblemBody(b *testing.B) {
	limit := algorithms.Limit{Algorithm: algorithms.SlidingWindow, Events: 100, Window: time.Minute}
	zones := []*Zone{{name: "api", limit: limit}, {name: "per_ip", limit: limit}}
	reqs := []algorithms.Request{{}, {}}
	ds := []algorithms.Decision{{Allowed: false, RetryAfter: 7 * time.Second}, {Allowed: true, Remaining: 3}}
	b.ReportAllocs()
	for b.Loop() {
		_ = problemBody(http.StatusTooManyRequests, &verdict{zones: zones, reqs: reqs, ds: ds}, 7*time.Second)
	}
}

// TestLazyProblemMatchesBody: the placeholder value a rejection sets reads
// as the body problem_details would send, for every mix of zones.
func TestLazyProblemMatchesBody(t *testing.T) {
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Events: 10, Window: time.Minute}
	zone := func(name string) *Zone { return headerZone(name, limit) }
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
