package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
)

// What the tests of adaptive zones (load shedding) share: upstreams built
// in the test, the zone's state from the admin API, the members of its
// headers, and closed-loop traffic by priority class.

// classMap is a Caddyfile `map` that sets {class} from the request's
// X-Class header: critical, normal and bulk as sent, anything else
// "other", a class no zone lists (the last class). A header the client
// sets is fine in a test; never in production.
const classMap = `	map {http.request.header.X-Class} {class} {
		critical critical
		normal   normal
		bulk     bulk
		default  other
	}
`

// capacityUpstream is an upstream of a fixed number of workers: a request
// waits (FIFO) for a free worker, holds it for the service time, and is
// answered 200 (or the status set). Its workers and status can be
// changed while it serves.
type capacityUpstream struct {
	srv     *httptest.Server
	service time.Duration
	status  atomic.Int64 // 0: 200

	mu      sync.Mutex
	workers int
	busy    int
	waiters []chan struct{}
}

func startCapacityUpstream(t *testing.T, workers int, service time.Duration) *capacityUpstream {
	t.Helper()
	u := &capacityUpstream{workers: workers, service: service}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	return u
}

// addr is the upstream's host:port, for reverse_proxy.
func (u *capacityUpstream) addr() string { return strings.TrimPrefix(u.srv.URL, "http://") }

func (u *capacityUpstream) serve(w http.ResponseWriter, r *http.Request) {
	if !u.acquire(r.Context()) {
		return
	}
	defer u.release()
	select {
	case <-time.After(u.service):
	case <-r.Context().Done():
		return
	}
	if status := u.status.Load(); status != 0 {
		w.WriteHeader(int(status))
	}
	_, _ = w.Write([]byte("served"))
}

func (u *capacityUpstream) acquire(ctx context.Context) bool {
	u.mu.Lock()
	if u.busy < u.workers && len(u.waiters) == 0 {
		u.busy++
		u.mu.Unlock()
		return true
	}
	ch := make(chan struct{})
	u.waiters = append(u.waiters, ch)
	u.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-ctx.Done():
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for i, w := range u.waiters {
		if w == ch { // still waiting: leave the line
			u.waiters = append(u.waiters[:i], u.waiters[i+1:]...)
			return false
		}
	}
	u.busy-- // granted as it left: give the worker back
	u.dispatch()
	return false
}

func (u *capacityUpstream) release() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.busy--
	u.dispatch()
}

// dispatch hands free workers to the longest waiting requests; u.mu held.
func (u *capacityUpstream) dispatch() {
	for u.busy < u.workers && len(u.waiters) > 0 {
		close(u.waiters[0])
		u.waiters = u.waiters[1:]
		u.busy++
	}
}

// setWorkers changes how many requests the upstream serves at once.
func (u *capacityUpstream) setWorkers(n int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.workers = n
	u.dispatch()
}

// holdUpstream holds every request until the test lets it go (one at a
// time, or all) or its client (Caddy) gives up on it, and reports which
// requests arrived, by their X-Tag header; but it answers /fast at once,
// and to /stream sends its header at once and holds the body.
type holdUpstream struct {
	srv     *httptest.Server
	arrived chan string // the X-Tag of each request, as it arrives
	gate    chan struct{}
	all     chan struct{}
	once    sync.Once
	held    atomic.Int64
}

func startHoldUpstream(t *testing.T) *holdUpstream {
	t.Helper()
	u := &holdUpstream{arrived: make(chan string, 1000), gate: make(chan struct{}, 1000), all: make(chan struct{})}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/fast":
			_, _ = w.Write([]byte("fast"))
			return
		case "/stream":
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte("header sent, "))
			http.NewResponseController(w).Flush()
		}
		u.held.Add(1)
		defer u.held.Add(-1)
		u.arrived <- r.Header.Get("X-Tag")
		select {
		case <-u.gate:
		case <-u.all:
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write([]byte("released " + r.Header.Get("X-Tag")))
	}))
	t.Cleanup(u.srv.Close)
	t.Cleanup(u.releaseAll) // before Close, which waits for the requests
	return u
}

func (u *holdUpstream) addr() string { return strings.TrimPrefix(u.srv.URL, "http://") }

// releaseOne lets one held (or the next) request go.
func (u *holdUpstream) releaseOne() { u.gate <- struct{}{} }

// releaseAll lets every request go, now and from now on.
func (u *holdUpstream) releaseAll() { u.once.Do(func() { close(u.all) }) }

// waitArrived waits for the next request to reach the upstream and
// returns its tag.
func (u *holdUpstream) waitArrived(t *testing.T) string {
	t.Helper()
	select {
	case tag := <-u.arrived:
		return tag
	case <-time.After(10 * time.Second):
		t.Fatal("no request reached the upstream within 10s")
		return ""
	}
}

// pending is a request sent in the background.
type pending struct {
	tag  string
	done chan struct{}
	res  response
	err  error
}

// send sends GET url in the background with X-Tag tag and the headers
// (name, value pairs), under ctx.
func send(ctx context.Context, client *http.Client, url, tag string, headers ...string) *pending {
	p := &pending{tag: tag, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			p.err = err
			return
		}
		req.Header.Set("X-Tag", tag)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			p.err = err
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		p.res = response{Status: resp.StatusCode, Header: resp.Header, Body: string(body)}
		p.err = err
	}()
	return p
}

// finished reports whether p has its answer.
func (p *pending) finished() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for p's answer, at most 15s.
func (p *pending) wait(t *testing.T) response {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("request %q: no answer within 15s", p.tag)
	}
	if p.err != nil {
		t.Fatalf("request %q: %v", p.tag, p.err)
	}
	return p.res
}

// adaptiveState is an adaptive zone's state in the admin API's listing.
type adaptiveState struct {
	Limit    int     `json:"limit"`
	InFlight int     `json:"in_flight"`
	Baseline float64 `json:"baseline_seconds"`
}

// listedZone is one zone of GET /rate_limit/zones.
type listedZone struct {
	Name      string         `json:"name"`
	Algorithm string         `json:"algorithm"`
	Events    int64          `json:"events"`
	Backend   string         `json:"backend"`
	Healthy   bool           `json:"healthy"`
	Adaptive  *adaptiveState `json:"adaptive"`
}

// listZones is the admin API's zone listing of c.
func listZones(t *testing.T, c *caddyProc) []listedZone {
	t.Helper()
	status, body := adminDo(t, http.MethodGet, c.AdminURL+"/rate_limit/zones", "", nil)
	var zones []listedZone
	if err := json.Unmarshal([]byte(body), &zones); status != http.StatusOK || err != nil {
		t.Fatalf("GET /rate_limit/zones: status %d, %s (%v)", status, body, err)
	}
	return zones
}

// waitBaseline waits, while light traffic runs, until zone on c has
// learned a baseline.
func waitBaseline(t *testing.T, c *caddyProc, zone string) {
	t.Helper()
	waitUntil(t, 15*time.Second, "a baseline learned under light traffic", func() (bool, string) {
		st := zoneState(t, c, zone)
		return st.Baseline > 0, fmt.Sprintf("%+v", st)
	})
}

// zoneState is adaptive zone's state on c, from the admin API.
func zoneState(t *testing.T, c *caddyProc, zone string) adaptiveState {
	t.Helper()
	for _, z := range listZones(t, c) {
		if z.Name == zone {
			if z.Adaptive == nil {
				t.Fatalf("zone %s listed without its adaptive state: %+v", zone, z)
			}
			return *z.Adaptive
		}
	}
	t.Fatalf("zone %s not in the admin API's listing", zone)
	return adaptiveState{}
}

// waitInFlight waits (at most 10s) until zone's in flight on c is want.
func waitInFlight(t *testing.T, c *caddyProc, zone string, want int) {
	t.Helper()
	waitUntil(t, 10*time.Second, fmt.Sprintf("zone %s in flight %d", zone, want), func() (bool, string) {
		st := zoneState(t, c, zone)
		return st.InFlight == want, fmt.Sprintf("%+v", st)
	})
}

// sfMember is one member of a RateLimit or RateLimit-Policy list: its
// name and parameters (integers and strings).
type sfMember struct {
	Name   string
	Params map[string]any
}

func (m sfMember) int(key string) (int64, bool) {
	v, ok := m.Params[key].(int64)
	return v, ok
}

// sfMembers parses the list field values into members.
func sfMembers(t *testing.T, values []string) []sfMember {
	t.Helper()
	list, err := httpsfv.UnmarshalList(values)
	if err != nil {
		t.Fatalf("%q: not a structured-field list: %v", values, err)
	}
	var out []sfMember
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		if !ok {
			t.Fatalf("%q: member %#v, want an item", values, m)
		}
		name, _ := item.Value.(string)
		mem := sfMember{Name: name, Params: map[string]any{}}
		for _, k := range item.Params.Names() {
			mem.Params[k], _ = item.Params.Get(k)
		}
		out = append(out, mem)
	}
	return out
}

// memberNames lists the members' names, in order.
func memberNames(ms []sfMember) []string {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.Name
	}
	return names
}

// checkShedAnswer checks a shed answer of zone: status, Retry-After,
// and one RateLimit and one RateLimit-Policy member, the zone's, with
// q the class's share (qu="concurrent-requests") and r = max(0, q − in
// flight).
func checkShedAnswer(t *testing.T, what string, res response, zone string, status int, q, inFlight int64) {
	t.Helper()
	if res.Status != status {
		t.Errorf("%s: status %d, want %d (shed)", what, res.Status, status)
		return
	}
	if ra := res.Header.Get("Retry-After"); ra == "" || strings.Trim(ra, "0123456789") != "" || ra == "0" {
		t.Errorf("%s: Retry-After %q, want a positive number of seconds", what, ra)
	}
	policy := sfMembers(t, res.Header.Values("RateLimit-Policy"))
	state := sfMembers(t, res.Header.Values("RateLimit"))
	if len(policy) != 1 || len(state) != 1 || policy[0].Name != zone || state[0].Name != zone {
		t.Errorf("%s: RateLimit-Policy %q, RateLimit %q: want one member each, %q's only",
			what, res.Header.Values("RateLimit-Policy"), res.Header.Values("RateLimit"), zone)
		return
	}
	gotQ, _ := policy[0].int("q")
	gotR, _ := state[0].int("r")
	if gotQ != q || policy[0].Params["qu"] != "concurrent-requests" || gotR != max(0, q-inFlight) {
		t.Errorf("%s: policy %v, state %v: want q=%d, qu=\"concurrent-requests\", r=%d",
			what, policy[0].Params, state[0].Params, q, max(0, q-inFlight))
	}
}

// classTraffic is closed-loop traffic, some clients per class, each
// sending one request after another until stopped, pausing after an
// answer that is not 200 so that a shed client does not spin.
type classTraffic struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	counts map[string]map[int]int // class → status → answers
	errors int
}

func startClassTraffic(client *http.Client, url string, clients map[string]int, pause time.Duration) *classTraffic {
	ctx, cancel := context.WithCancel(context.Background())
	tr := &classTraffic{cancel: cancel, counts: map[string]map[int]int{}}
	for class, n := range clients {
		tr.counts[class] = map[int]int{}
		for range n {
			tr.wg.Add(1)
			go func() {
				defer tr.wg.Done()
				for ctx.Err() == nil {
					status, err := classGet(ctx, client, url, class)
					if ctx.Err() != nil {
						return
					}
					tr.mu.Lock()
					if err != nil {
						tr.errors++
					} else {
						tr.counts[class][status]++
					}
					tr.mu.Unlock()
					if err != nil || status != http.StatusOK {
						select {
						case <-ctx.Done():
						case <-time.After(pause):
						}
					}
				}
			}()
		}
	}
	return tr
}

func classGet(ctx context.Context, client *http.Client, url, class string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-Class", class)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, err
}

// snapshot is a copy of the counts so far.
func (tr *classTraffic) snapshot() map[string]map[int]int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make(map[string]map[int]int, len(tr.counts))
	for class, byStatus := range tr.counts {
		out[class] = make(map[int]int, len(byStatus))
		for s, n := range byStatus {
			out[class][s] = n
		}
	}
	return out
}

// stop stops the clients and waits for them.
func (tr *classTraffic) stop() {
	tr.cancel()
	tr.wg.Wait()
}

// total is the answers of class in counts, and those of status.
func total(counts map[string]map[int]int, class string, status int) (all, of int) {
	for s, n := range counts[class] {
		all += n
		if s == status {
			of += n
		}
	}
	return all, of
}

// diff is after − before, per class and status.
func diff(after, before map[string]map[int]int) map[string]map[int]int {
	out := map[string]map[int]int{}
	for class, byStatus := range after {
		out[class] = map[int]int{}
		for s, n := range byStatus {
			out[class][s] = n - before[class][s]
		}
	}
	return out
}

// inCaddy is the requests c is handling (Caddy's own gauge; the site
// needs the global `metrics` option): those at the upstream and those
// waiting in a zone's queue.
const inCaddy = `caddy_http_requests_in_flight{handler="subroute",server="srv0"}`

// waitInCaddy waits (at most 10s) until c handles n requests: a request
// sent is then known to be inside, at the upstream or queued.
func waitInCaddy(t *testing.T, c *caddyProc, n int) {
	t.Helper()
	waitUntil(t, 10*time.Second, fmt.Sprintf("%d requests inside Caddy", n), func() (bool, string) {
		got := max(0, metricValue(t, c, inCaddy)) // absent after a reload until a request comes
		return got == float64(n), fmt.Sprintf("%v", got)
	})
}

// decisions is the count of caddy_rate_limit_adaptive_decisions_total
// for zone, class and outcome on c (0 when the series is absent).
func decisions(t *testing.T, c *caddyProc, zone, class, outcome string) int {
	t.Helper()
	v := metricValue(t, c, fmt.Sprintf(`caddy_rate_limit_adaptive_decisions_total{class=%q,outcome=%q,zone=%q}`, class, outcome, zone))
	return max(0, int(v))
}

// withoutRedis marks a test that starts no Redis (an adaptive zone is
// decided in process): make test runs it; make test-servers, which runs
// this package once per Redis server (SLUICE_MATRIX=1), skips it.
func withoutRedis(t *testing.T) {
	t.Helper()
	if os.Getenv("SLUICE_MATRIX") == "1" {
		t.Skip("starts no Redis: make test runs it once")
	}
}
