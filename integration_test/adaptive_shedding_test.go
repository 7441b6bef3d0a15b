package integration_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// pinnedSite is a site whose adaptive zone upstream has its limit pinned
// (min = events = limit: it cannot move) with the classes critical,
// normal and bulk of classMap and reserve 20%, beside a zone tenant on
// the embedded store that admits everything, in front of upstream.
func pinnedSite(limit int, upstream string) string {
	return classMap + fmt.Sprintf(`	rate_limit {
		zone upstream {
			key static
			algorithm adaptive
			events %d
			adaptive {
				min %d
			}
			priority {class} critical normal bulk
			reserve 20%%
		}
		zone tenant {
			key static
			algorithm sliding_window
			events 1000
			window 1h
		}
	}
	reverse_proxy %s`, limit, limit, upstream)
}

// TestAdaptiveShedOrderAndHeaders: with the limit at 10 and reserve 20%,
// bulk may use 8 slots, normal 9, critical 10 (floor(limit × (1 −
// reserve × i/(n−1)))). Requests held at the upstream fill the slots one
// by one: bulk (and a class no zone lists, the last class) is shed first,
// at 8 in flight, then normal at 9, then critical at 10. Each shed answer
// is a 503 with Retry-After and only the adaptive zone's members, q the
// class's share and qu="concurrent-requests", r = max(0, q − in flight);
// the admitted requests carry both zones' members, in name order, r what
// was left of the share once their slot was taken. A shed request never
// reaches the upstream, and once the held requests are answered nothing
// is in flight.
func TestAdaptiveShedOrderAndHeaders(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	caddy := startCaddy(t, caddyConfig{Site: pinnedSite(10, u.addr())})
	client := newClient(16)
	ctx := t.Context()

	var admitted []*pending
	hold := func(class string, i int) {
		t.Helper()
		p := send(ctx, client, caddy.URL+"/", fmt.Sprintf("%s-%d", class, i), "X-Class", class)
		if tag := u.waitArrived(t); tag != p.tag {
			t.Fatalf("upstream got %q, want %q", tag, p.tag)
		}
		admitted = append(admitted, p)
	}
	shed := func(class string, share int64) {
		t.Helper()
		res := get(t, client, caddy.URL+"/", "X-Class", class, "X-Tag", "shed-"+class)
		checkShedAnswer(t, class+" request over its share", res, "upstream", http.StatusServiceUnavailable, share, share)
	}

	for i := range 8 {
		hold("bulk", i)
	}
	shed("bulk", 8)
	shed("mystery", 8) // a class no zone lists is the last class
	hold("normal", 0)  // 9 in flight
	shed("normal", 9)
	shed("bulk", 8)
	hold("critical", 0) // 10 in flight
	shed("critical", 10)
	shed("normal", 9)
	if st := zoneState(t, caddy, "upstream"); st.Limit != 10 || st.InFlight != 10 {
		t.Errorf("admin API: %+v, want limit 10 and 10 in flight", st)
	}
	if n := u.held.Load(); n != 10 {
		t.Errorf("upstream holds %d requests, want the 10 admitted (a shed request never reaches it)", n)
	}

	u.releaseAll()
	shares := map[string]int64{"bulk": 8, "normal": 9, "critical": 10}
	for i, p := range admitted {
		res := p.wait(t)
		if res.Status != http.StatusOK {
			t.Errorf("%s: status %d, want 200", p.tag, res.Status)
			continue
		}
		class, _, _ := strings.Cut(p.tag, "-")
		q := shares[class]
		wantR := max(0, q-int64(i+1)) // the i-th admitted request took slot i+1
		policy := sfMembers(t, res.Header.Values("RateLimit-Policy"))
		state := sfMembers(t, res.Header.Values("RateLimit"))
		if !slices.Equal(memberNames(policy), []string{"tenant", "upstream"}) || !slices.Equal(memberNames(state), []string{"tenant", "upstream"}) {
			t.Errorf("%s: RateLimit-Policy %q, RateLimit %q: want members tenant and upstream, in name order",
				p.tag, res.Header.Values("RateLimit-Policy"), res.Header.Values("RateLimit"))
			continue
		}
		gotQ, _ := policy[1].int("q")
		gotR, _ := state[1].int("r")
		if gotQ != q || policy[1].Params["qu"] != "concurrent-requests" || gotR != wantR {
			t.Errorf("%s: upstream's policy %v, state %v: want q=%d, qu=\"concurrent-requests\", r=%d",
				p.tag, policy[1].Params, state[1].Params, q, wantR)
		}
	}
	waitInFlight(t, caddy, "upstream", 0)
	if got := get(t, client, caddy.URL+"/", "X-Class", "bulk").Status; got != http.StatusOK {
		t.Errorf("after the held requests were answered: bulk got %d, want 200", got)
	}
}

// TestAdaptiveShedAnswerShapes: the zone's status replaces 503; with
// problem_details the shed answer is an application/problem+json body
// whose type is not quota-exceeded; with handle_errors the error routes
// shape the answer, as for any rejection, and the headers stay.
func TestAdaptiveShedAnswerShapes(t *testing.T) {
	withoutRedis(t)
	u := startHoldUpstream(t)
	zone := func(name, extra string) string {
		return fmt.Sprintf(`		zone %s {
			key static
			algorithm adaptive
			events 1
%s		}
`, name, extra)
	}
	site := fmt.Sprintf(`	handle /problem {
		rate_limit {
			problem_details
%s		}
		reverse_proxy %s
	}
	handle /status {
		rate_limit {
%s		}
		reverse_proxy %s
	}`, zone("pd", ""), u.addr(), zone("own_status", "\t\t\tstatus 429\n"), u.addr())
	client := newClient(4)

	t.Run("handler answers", func(t *testing.T) {
		caddy := startCaddy(t, caddyConfig{Site: site})
		for _, path := range []string{"/problem", "/status"} {
			send(t.Context(), client, caddy.URL+path, "held"+path)
			u.waitArrived(t)
		}

		res := get(t, client, caddy.URL+"/problem")
		checkShedAnswer(t, "problem_details", res, "pd", http.StatusServiceUnavailable, 1, 1)
		var problem struct {
			Type   string `json:"type"`
			Status int    `json:"status"`
		}
		if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("problem_details: Content-Type %q, want application/problem+json", ct)
		}
		if err := json.Unmarshal([]byte(res.Body), &problem); err != nil || problem.Status != 503 ||
			problem.Type == "" || strings.Contains(problem.Type, "quota-exceeded") {
			t.Errorf("problem_details: body %s (%v): want a problem of status 503 whose type is not quota-exceeded", res.Body, err)
		}

		res = get(t, client, caddy.URL+"/status")
		checkShedAnswer(t, "status 429", res, "own_status", http.StatusTooManyRequests, 1, 1)
	})

	t.Run("handle_errors", func(t *testing.T) {
		caddy := startCaddy(t, caddyConfig{Site: site + `
	handle_errors {
		respond "shaped {err.status_code}"
	}`})
		for _, path := range []string{"/problem", "/status"} {
			send(t.Context(), client, caddy.URL+path, "held"+path)
			u.waitArrived(t)
		}
		for _, c := range []struct {
			path, zone string
			status     int
		}{{"/problem", "pd", 503}, {"/status", "own_status", 429}} {
			res := get(t, client, caddy.URL+c.path)
			checkShedAnswer(t, "handle_errors "+c.path, res, c.zone, c.status, 1, 1)
			if want := fmt.Sprintf("shaped %d", c.status); res.Body != want {
				t.Errorf("handle_errors %s: body %q, want %q (the error routes answer)", c.path, res.Body, want)
			}
		}
	})
}

// TestConcurrencyZoneClasses: priority and reserve on a static
// concurrency zone (on Redis): a request's class's share of events is its
// limit, with no queue: with events 10 and reserve 20%, bulk is refused
// at 8 in flight, normal at 9, critical at 10, each answer with q its
// class's share.
func TestConcurrencyZoneClasses(t *testing.T) {
	srv := redistest.Start(t)
	u := startHoldUpstream(t)
	caddy := startCaddy(t, caddyConfig{Site: classMap + fmt.Sprintf(`	rate_limit {
%s		zone backend {
			key static
			algorithm concurrency
			events 10
			priority {class} critical normal bulk
			reserve 20%%
		}
	}
	reverse_proxy %s`, exactRedis(srv), u.addr())})
	client := newClient(16)

	hold := func(class string, i int) {
		t.Helper()
		send(t.Context(), client, caddy.URL+"/", fmt.Sprintf("%s-%d", class, i), "X-Class", class)
		u.waitArrived(t)
	}
	refused := func(class string, share int64) {
		t.Helper()
		res := get(t, client, caddy.URL+"/", "X-Class", class)
		if res.Status != http.StatusTooManyRequests {
			t.Errorf("%s over its share: status %d, want 429", class, res.Status)
			return
		}
		policy := sfMembers(t, res.Header.Values("RateLimit-Policy"))
		if len(policy) != 1 || policy[0].Name != "backend" || policy[0].Params["q"] != share ||
			policy[0].Params["qu"] != "concurrent-requests" {
			t.Errorf("%s over its share: RateLimit-Policy %q, want \"backend\";q=%d;qu=\"concurrent-requests\"",
				class, res.Header.Values("RateLimit-Policy"), share)
		}
	}
	for i := range 8 {
		hold("bulk", i)
	}
	refused("bulk", 8)
	hold("normal", 0)
	refused("normal", 9)
	refused("bulk", 8)
	hold("critical", 0)
	refused("critical", 10)
	if n := u.held.Load(); n != 10 {
		t.Errorf("upstream holds %d requests, want 10", n)
	}
}
