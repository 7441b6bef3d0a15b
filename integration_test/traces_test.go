package integration_test

import (
	"cmp"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// otlpReceiver is an OTLP/HTTP trace receiver (protobuf) on 127.0.0.1: the
// endpoint Caddy's exporter sends its spans to.
type otlpReceiver struct {
	URL   string
	mu    sync.Mutex
	spans []*tracepb.Span
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv := &otlpReceiver{URL: "http://" + ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "want an OTLP/HTTP protobuf trace export at /v1/traces", http.StatusBadRequest)
			return
		}
		rcv.mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				rcv.spans = append(rcv.spans, ss.GetSpans()...)
			}
		}
		rcv.mu.Unlock()
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return rcv
}

// decided is the spans received that carry rate_limit.outcome.
func (rcv *otlpReceiver) decided() []*tracepb.Span {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range rcv.spans {
		if attr(s, "rate_limit.outcome") != nil {
			out = append(out, s)
		}
	}
	return out
}

func attr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}

// TestTraces: behind Caddy's tracing directive, each decision adds its
// zones, outcome, remaining and (on a rejection) Retry-After to the
// request's span, exported to a real OTLP receiver; the key is never there
// without log_key.
func TestTraces(t *testing.T) {
	rcv := startOTLPReceiver(t)
	// Caddy's exporter (autoexport) reads the standard variables
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	srv := redistest.Start(t)
	const secret = "tenant-secret-4711"
	caddy := startCaddy(t, caddyConfig{Site: `	route {
		tracing {
			span sluice
		}
		rate_limit {
` + exactRedis(srv) + `			zone traced {
				key {http.request.header.X-Key}
				algorithm fixed_window
				events 2
				window 1h
			}
			zone traced_wide {
				key static
				algorithm fixed_window
				events 100
				window 1h
			}
		}
		respond "ok" 200
	}`})
	client := newClient(1)
	var statuses []int
	for range 3 {
		statuses = append(statuses, get(t, client, caddy.URL+"/", "X-Key", secret).Status)
	}
	if !slices.Equal(statuses, []int{200, 200, 429}) {
		t.Fatalf("statuses: got %v, want [200 200 429]", statuses)
	}
	var spans []*tracepb.Span
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if spans = rcv.decided(); len(spans) >= 3 {
			break
		}
	}
	if len(spans) != 3 {
		t.Fatalf("spans with rate_limit.outcome: got %d, want 3", len(spans))
	}
	slices.SortFunc(spans, func(a, b *tracepb.Span) int { return cmp.Compare(a.GetStartTimeUnixNano(), b.GetStartTimeUnixNano()) })
	wants := []struct {
		outcome    string
		remaining  int64
		retryAfter bool
	}{{"allowed", 1, false}, {"allowed", 0, false}, {"denied", 0, true}}
	for i, s := range spans {
		w := wants[i]
		var zones []string
		for _, v := range attr(s, "rate_limit.zones").GetArrayValue().GetValues() {
			zones = append(zones, v.GetStringValue())
		}
		if !slices.Equal(zones, []string{"traced", "traced_wide"}) {
			t.Errorf("span %d: rate_limit.zones got %v, want [traced traced_wide]", i, zones)
		}
		if got := attr(s, "rate_limit.outcome").GetStringValue(); got != w.outcome {
			t.Errorf("span %d: rate_limit.outcome got %q, want %q", i, got, w.outcome)
		}
		if v := attr(s, "rate_limit.remaining"); v == nil || v.GetIntValue() != w.remaining {
			t.Errorf("span %d: rate_limit.remaining got %v, want %d", i, v, w.remaining)
		}
		if v := attr(s, "rate_limit.retry_after"); w.retryAfter != (v != nil) || (v != nil && v.GetIntValue() < 1) {
			t.Errorf("span %d: rate_limit.retry_after got %v, want it (≥ 1) only on the rejection", i, v)
		}
		for _, kv := range s.GetAttributes() {
			if strings.Contains(kv.GetKey(), "key") && strings.HasPrefix(kv.GetKey(), "rate_limit.") ||
				strings.Contains(kv.GetValue().String(), secret) && strings.HasPrefix(kv.GetKey(), "rate_limit.") {
				t.Errorf("span %d: %s=%v: a key without log_key", i, kv.GetKey(), kv.GetValue())
			}
		}
		t.Logf("span %d %q: %v", i, s.GetName(), s.GetAttributes())
	}
}

// TestTracesRejectionStatus: behind Caddy's tracing directive, the span of
// a request Sluice rejects reports the rejection's status as
// http.response.status_code (Caddy's OpenTelemetry wrapper starts at 200
// and sets what was written inside its span once the handler returns),
// whoever writes the answer: Caddy's bare error status, handle_errors
// shaping the body and headers, or problem_details; and the client gets
// the same answer, headers and all. So does failure_mode closed's 503.
func TestTracesRejectionStatus(t *testing.T) {
	rcv := startOTLPReceiver(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	srv := redistest.Start(t)
	tests := []struct {
		name        string
		options     string // in rate_limit
		site        string // beside the route
		status      int    // the rejection's
		contentType string // of the rejection
		body        string // in the rejection's body
		down        bool   // Redis is down: every request is refused
		route       string // in the route, before rate_limit
	}{
		{name: "bare", status: 429},
		{name: "status", options: "status 503", status: 503},
		{name: "handle_errors", status: 429, contentType: "application/problem+json", body: `"violated-policies":["traced_status"]`,
			site: "\thandle_errors {\n\t\theader Content-Type application/problem+json\n\t\theader X-Shaped-By handle_errors\n\t\trespond {http.rate_limit.problem} {http.error.status_code}\n\t}\n"},
		{name: "handle_errors for another status", status: 429,
			site: "\thandle_errors 404 {\n\t\trespond \"not found\" 404\n\t}\n"},
		{name: "handle_errors after a rewrite", status: 429, body: "original /", route: "\t\trewrite * /rewritten\n",
			site: "\thandle_errors {\n\t\t@original path /\n\t\thandle @original {\n\t\t\trespond \"original {http.request.uri}\" 429\n\t\t}\n\t\thandle {\n\t\t\trespond \"rewritten {http.request.uri}\" 429\n\t\t}\n\t}\n"},
		{name: "problem_details", options: "problem_details", status: 429, contentType: "application/problem+json", body: `"status":429`},
		{name: "failure_mode closed", options: "failure_mode closed", status: 503, down: true},
		{name: "failure_mode closed, handle_errors", options: "failure_mode closed", status: 503, down: true, body: "refused",
			site: "\thandle_errors {\n\t\trespond \"refused\" {http.error.status_code}\n\t}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			span := "traced_" + strings.NewReplacer(" ", "_", ",", "").Replace(tt.name)
			redis := redisBlock(srv, "timeout 5s") // a slow answer is still Redis's 429
			if tt.down {
				redis = "\t\tredis {\n\t\t\turl redis://127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)) + "/0\n\t\t}\n"
			}
			caddy := startCaddy(t, caddyConfig{Site: `	route {
		tracing {
			span ` + span + `
		}
` + tt.route + `		rate_limit {
` + redis + "\t\t\t" + tt.options + `
			zone traced_status {
				key ` + span + `
				algorithm fixed_window
				events 1
				window 1h
			}
		}
		respond "ok" 200
	}
` + tt.site})
			client := newClient(1)
			want := []int64{200, int64(tt.status)}
			if tt.down {
				want = want[1:]
			} else if got := get(t, client, caddy.URL+"/").Status; got != 200 {
				t.Fatalf("first request: got %d, want 200", got)
			}
			rejected := get(t, client, caddy.URL+"/")
			if tt.down {
				if rejected.Status != tt.status || !strings.Contains(rejected.Body, tt.body) || rejected.Header.Get("Retry-After") != "2" {
					t.Errorf("refusal: got %d %q, Retry-After %q, want %d with %q, Retry-After 2", rejected.Status, rejected.Body, rejected.Header.Get("Retry-After"), tt.status, tt.body)
				}
			} else {
				checkRejection(t, rejected, tt.status, tt.contentType, tt.body)
			}
			if tt.site != "" && strings.Contains(tt.site, "X-Shaped-By") && rejected.Header.Get("X-Shaped-By") != "handle_errors" {
				t.Errorf("X-Shaped-By: got %q, want handle_errors's header", rejected.Header.Get("X-Shaped-By"))
			}
			if got := spanStatuses(t, rcv, span, len(want)); !slices.Equal(got, want) {
				t.Errorf("http.response.status_code of the spans: got %v, want %v", got, want)
			}
		})
	}
}

// checkRejection checks a rejection as the client sees it: status, the
// rate-limit headers and Retry-After, and the shaped body's type and text.
func checkRejection(t *testing.T, res response, status int, contentType, body string) {
	t.Helper()
	if res.Status != status {
		t.Fatalf("rejection: got %d, want %d (body %q)", res.Status, status, res.Body)
	}
	for _, field := range []string{"Retry-After", "RateLimit", "RateLimit-Policy"} {
		if res.Header.Get(field) == "" {
			t.Errorf("rejection: no %s (headers %v)", field, res.Header)
		}
	}
	if contentType != "" && res.Header.Get("Content-Type") != contentType {
		t.Errorf("rejection: Content-Type %q, want %q", res.Header.Get("Content-Type"), contentType)
	}
	if !strings.Contains(res.Body, body) {
		t.Errorf("rejection: body %q, want it to contain %q", res.Body, body)
	}
}

// spanStatuses waits for n spans named name and returns their
// http.response.status_code, in start order.
func spanStatuses(t *testing.T, rcv *otlpReceiver, name string, n int) []int64 {
	t.Helper()
	var spans []*tracepb.Span
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		rcv.mu.Lock()
		spans = spans[:0]
		for _, s := range rcv.spans {
			if s.GetName() == name {
				spans = append(spans, s)
			}
		}
		rcv.mu.Unlock()
		if len(spans) >= n {
			break
		}
	}
	if len(spans) != n {
		t.Fatalf("spans named %s: got %d, want %d", name, len(spans), n)
	}
	slices.SortFunc(spans, func(a, b *tracepb.Span) int { return cmp.Compare(a.GetStartTimeUnixNano(), b.GetStartTimeUnixNano()) })
	statuses := make([]int64, n)
	for i, s := range spans {
		statuses[i] = attr(s, "http.response.status_code").GetIntValue()
		t.Logf("span %d: %v", i, s.GetAttributes())
	}
	return statuses
}
