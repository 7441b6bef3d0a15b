package integration_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestServerAnswered reads off a running Caddy which server answers (the
// one of the matrix the tests run: SLUICE_REDIS_SERVER): the provision log
// says it once per shared client, with Function or EVALSHA, and the admin
// API's zone listing shows the same.
func TestServerAnswered(t *testing.T) {
	srv := redistest.Start(t)
	want := redistest.ServerVersion(t)
	// two handlers with the same redis settings: one shared client
	zone := func(name string) string {
		return `	rate_limit {
` + exactRedis(srv) + `		zone ` + name + ` {
			key static
			events 5
			window 1m
		}
	}
`
	}
	caddy := startCaddy(t, caddyConfig{Site: `	route /a {
` + zone("answered_a") + `		respond "a" 200
	}
	route /b {
` + zone("answered_b") + `		respond "b" 200
	}`})
	client := newClient(1)
	for _, p := range []string{"/a", "/b"} {
		if got := get(t, client, caddy.URL+p).Status; got != 200 {
			t.Fatalf("GET %s: got %d, want 200", p, got)
		}
	}

	decisions := map[bool]string{true: "function", false: "evalsha"}[want.Functions()]
	waitLogEntry(t, caddy, func(e map[string]any) bool { return e["msg"] == "redis server answered" }, "redis server answered line")
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(caddy.Log.String()))
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var e map[string]any
		if json.Unmarshal(sc.Bytes(), &e) == nil && e["msg"] == "redis server answered" {
			lines = append(lines, e)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("\"redis server answered\" lines: got %d, want 1 (one shared client): %v", len(lines), lines)
	}
	if e := lines[0]; e["server"] != want.String() || e["functions"] != want.Functions() || e["decisions"] != decisions {
		t.Errorf("log line: got %v, want server %q, functions %v, decisions %s", e, want, want.Functions(), decisions)
	}

	// the listing answers at once: the server is known since provision
	start := time.Now()
	status, body := adminDo(t, http.MethodGet, caddy.AdminURL+"/rate_limit/zones", "", nil)
	var zones []map[string]any
	if err := json.Unmarshal([]byte(body), &zones); status != 200 || err != nil || len(zones) != 2 {
		t.Fatalf("zones: got %d %s (%v), want 2 zones", status, body, err)
	}
	for _, z := range zones {
		if z["backend"] != "redis" || z["server"] != want.String() || z["functions"] != want.Functions() {
			t.Errorf("zone %v: got server %v, functions %v; want %q, %v", z["name"], z["server"], z["functions"], want, want.Functions())
		}
	}
	t.Logf("%s answered (decisions: %s); listing took %v", want, decisions, time.Since(start))
}

// TestServerAnsweredMemory: a zone on the embedded store names no server.
func TestServerAnsweredMemory(t *testing.T) {
	caddy := startCaddy(t, caddyConfig{Site: `	rate_limit {
		zone answered_mem {
			key static
			events 5
			window 1m
		}
	}
	respond "ok" 200`})
	status, body := adminDo(t, http.MethodGet, caddy.AdminURL+"/rate_limit/zones", "", nil)
	var zones []map[string]any
	if err := json.Unmarshal([]byte(body), &zones); status != 200 || err != nil || len(zones) != 1 {
		t.Fatalf("zones: got %d %s (%v)", status, body, err)
	}
	if _, ok := zones[0]["server"]; ok || zones[0]["functions"] != nil {
		t.Errorf("memory zone: got %v, want no server and no functions", zones[0])
	}
}
