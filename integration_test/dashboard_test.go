package integration_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// matrixOnly skips t unless the server matrix runs it (make test-servers
// sets SLUICE_MATRIX=1): it needs tools make test does not install.
func matrixOnly(t *testing.T) {
	t.Helper()
	if os.Getenv("SLUICE_MATRIX") != "1" {
		t.Skip("run by make test-servers (SLUICE_MATRIX=1)")
	}
}

// TestDashboardQueries runs every query of examples/grafana-dashboard.json
// through a real Prometheus (Debian's) that scrapes a real Caddy on two
// Redis servers, one of which goes down: allowed, denied, dry-run,
// refunded, delayed and failed-open traffic. Each query must return data.
func TestDashboardQueries(t *testing.T) {
	matrixOnly(t)
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus not found (make servers-deps installs it): %v", err)
	}
	live, doomed := redistest.Start(t), redistest.Start(t)
	zone := func(name, redis, body string) string {
		return "\trate_limit {\n" + redis + "\t\tzone " + name + " {\n" + body + "\t\t}\n\t}\n"
	}
	site := `	route /a {
` + zone("dash_a", redisBlock(live), "\t\t\tkey {http.request.header.X-Key}\n\t\t\tevents 3\n\t\t\twindow 1h\n") + `		respond "a" 200
	}
	route /dry {
` + zone("dash_dry", redisBlock(live), "\t\t\tkey static\n\t\t\tevents 1\n\t\t\twindow 1h\n\t\t\tdry_run\n") + `		respond "dry" 200
	}
	route /refund {
` + zone("dash_refund", redisBlock(live), "\t\t\tkey static\n\t\t\tevents 1000\n\t\t\twindow 1h\n\t\t\tcount_status 401\n") + `		respond "refunded" 200
	}
	route /delay {
` + zone("dash_delay", redisBlock(live), "\t\t\tkey static\n\t\t\talgorithm token_bucket\n\t\t\tevents 20\n\t\t\twindow 1s\n\t\t\tburst 1\n\t\t\tmax_delay 2s\n") + `		respond "delayed" 200
	}
	route /slot {
` + zone("dash_slot", redisBlock(live), "\t\t\tkey static\n\t\t\talgorithm concurrency\n\t\t\tevents 5\n") + `		respond "held" 200
	}
	route /b {
` + zone("dash_b", redisBlock(doomed, "timeout 100ms"), "\t\t\tkey static\n\t\t\tevents 1000\n\t\t\twindow 1h\n") + `		respond "b" 200
	}`
	caddy := startCaddy(t, caddyConfig{Global: "\tmetrics", Site: site})

	// Prometheus on 127.0.0.1, scraping Caddy's admin /metrics every second
	dir := t.TempDir()
	port := redistest.FreePort(t)
	admin := strings.TrimPrefix(caddy.AdminURL, "http://")
	conf := fmt.Sprintf("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: caddy\n    static_configs:\n      - targets: [%q]\n", admin)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(prom, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address=127.0.0.1:"+strconv.Itoa(port))
	out := &redistest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus output:\n%s", out.String())
		}
	})
	promURL := "http://127.0.0.1:" + strconv.Itoa(port)

	client := newClient(8)
	for i := range 12 { // allowed, then denied (and deny-cache hits)
		get(t, client, caddy.URL+"/a", "X-Key", "k"+strconv.Itoa(i%2))
	}
	for range 4 {
		get(t, client, caddy.URL+"/dry")
		get(t, client, caddy.URL+"/refund")
		get(t, client, caddy.URL+"/slot")
		get(t, client, caddy.URL+"/b")
	}
	var wg sync.WaitGroup
	for range 6 { // a burst of 1: the others wait their turn
		wg.Go(func() { get(t, client, caddy.URL+"/delay") })
	}
	wg.Wait()
	doomed.Kill() // an outage of one of the two: failed open
	for range 30 {
		if got := get(t, client, caddy.URL+"/b").Status; got != 200 {
			t.Fatalf("GET /b with its Redis down: got %d, want 200 (failure_mode open)", got)
		}
	}
	if got := metricValue(t, caddy, `caddy_rate_limit_decisions_total{outcome="delayed",zone="dash_delay"}`); got < 1 {
		t.Errorf("delayed decisions: got %v, want some", got)
	}

	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	raw, err := os.ReadFile("../examples/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	vars := strings.NewReplacer(`$__rate_interval`, "30s", `$zone`, ".*", `$redis`, ".*")
	pending := map[string]string{} // expr → panel
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			pending[vars.Replace(tg.Expr)] = p.Title
		}
	}
	t.Logf("%d panels, %d queries", len(d.Panels), len(pending))
	last := map[string]string{}
	for deadline := time.Now().Add(60 * time.Second); len(pending) > 0 && time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		for expr := range pending {
			n, err := promQuery(promURL, expr)
			if err == nil && n > 0 {
				delete(pending, expr)
				continue
			}
			last[expr] = fmt.Sprintf("%d series, %v", n, err)
		}
	}
	for expr, panel := range pending {
		t.Errorf("panel %q: %s returned no data (%s)", panel, expr, last[expr])
	}
	// the outage is where the operator sees it: per Redis
	for expr, want := range map[string]string{
		`max_over_time(caddy_rate_limit_circuit_open{redis="` + doomed.Addr + `"}[1m])`: "1",
		`max_over_time(caddy_rate_limit_circuit_open{redis="` + live.Addr + `"}[1m])`:   "0",
	} {
		if got, err := promValue(promURL, expr); err != nil || got != want {
			t.Errorf("%s: got %q (%v), want %s", expr, got, err, want)
		}
	}
	errs := metricValue(t, caddy, `caddy_rate_limit_backend_errors_total{cause="connection",redis="`+doomed.Addr+`"}`) +
		metricValue(t, caddy, `caddy_rate_limit_backend_errors_total{cause="circuit_open",redis="`+doomed.Addr+`"}`) +
		metricValue(t, caddy, `caddy_rate_limit_backend_errors_total{cause="timeout",redis="`+doomed.Addr+`"}`)
	if failed := metricValue(t, caddy, `caddy_rate_limit_decisions_total{outcome="failed_open",zone="dash_b"}`); failed != 30 || errs != failed {
		t.Errorf("outage: %v failed-open decisions, %v errors of the doomed Redis; want 30 and 30", failed, errs)
	}
}

// promQuery runs an instant query and returns how many series it gave.
func promQuery(base, expr string) (int, error) {
	var r struct {
		Status string
		Error  string
		Data   struct{ Result []json.RawMessage }
	}
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, err
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("%s: %s", r.Status, r.Error)
	}
	return len(r.Data.Result), nil
}

// promValue is the value of the one series expr gives.
func promValue(base, expr string) (string, error) {
	var r struct {
		Data struct {
			Result []struct{ Value []any }
		}
	}
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return "", err
	}
	if len(r.Data.Result) != 1 || len(r.Data.Result[0].Value) != 2 {
		return "", fmt.Errorf("got %d series", len(r.Data.Result))
	}
	return fmt.Sprint(r.Data.Result[0].Value[1]), nil
}
