package integration_test

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/headertest"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// headerZone is one zone of a headers test case. All use sliding_log, which
// is exact and does not change with time during a test that lasts seconds.
type headerZone struct {
	name   string
	events int
	window time.Duration
}

// TestHeaders checks the ietf, legacy and x header styles together, on
// allowed and rejected responses of a real Caddy deciding on Redis (the
// clock is Redis's), and Retry-After on every rejection. Which fields each
// style sends, and their values per decision, are the unit tests'
// (TestServeHTTPHeaderStyles, TestServeHTTPHeaderValues).
func TestHeaders(t *testing.T) {
	srv := redistest.Start(t)
	zones := []headerZone{{"api", 5, time.Minute}, {"global", 10, 2 * time.Minute}}
	var site strings.Builder
	fmt.Fprintf(&site, "\thandle /headers {\n\t\trate_limit {\n%s\t\t\theaders ietf legacy x\n", exactRedis(srv))
	for _, z := range zones {
		fmt.Fprintf(&site, "\t\t\tzone %s {\n\t\t\t\tkey static\n\t\t\t\talgorithm sliding_log\n\t\t\t\tevents %d\n\t\t\t\twindow %s\n\t\t\t}\n",
			z.name, z.events, z.window)
	}
	site.WriteString("\t\t}\n\t\trespond \"ok\" 200\n\t}\n\trespond \"no route\" 404\n")
	caddy := startCaddy(t, caddyConfig{Site: site.String()})
	client := newClient(1)

	limiting := zones[0] // the zone with the fewest events
	// Two rejections after the limit: the first must not consume anything
	// that changes the second.
	var first time.Time
	for i := range limiting.events + 2 {
		sent := time.Now()
		if i == 0 {
			first = sent
		}
		resp := get(t, client, caddy.URL+"/headers")
		received := time.Now()

		allowed := i < limiting.events
		admitted := min(i+1, limiting.events)
		wantStatus := http.StatusOK
		if !allowed {
			wantStatus = http.StatusTooManyRequests
		}
		if got, want := resp.Status, wantStatus; got != want {
			t.Fatalf("request %d: got status %d, want %d (body %q, headers %v)", i+1, got, want, resp.Body, resp.Header)
		}
		c := headerCheck{t: t, req: i + 1, h: resp.Header}
		c.ietf(zones, admitted)
		c.legacy(limiting, limiting.events-admitted)
		c.x(limiting, limiting.events-admitted, sent, received)
		if !allowed {
			c.retryAfter(limiting, received.Sub(first))
		}
	}
}

// headerCheck checks the rate limit headers of one response.
type headerCheck struct {
	t   *testing.T
	req int // 1-based request number, for messages
	h   http.Header
}

// ietf checks RateLimit-Policy and RateLimit: one member per zone, named
// after it, with q/w and r/t; admitted requests so far in every zone.
func (c headerCheck) ietf(zones []headerZone, admitted int) {
	c.t.Helper()
	policy := c.sfList("RateLimit-Policy")
	limit := c.sfList("RateLimit")
	for _, z := range zones {
		w := int64(z.window / time.Second)
		if p, ok := policy[z.name]; !ok {
			c.t.Errorf("request %d: RateLimit-Policy %q has no member %q", c.req, c.h.Values("RateLimit-Policy"), z.name)
		} else {
			c.intParam("RateLimit-Policy", z.name, p, "q", int64(z.events), int64(z.events))
			c.intParam("RateLimit-Policy", z.name, p, "w", w, w)
		}
		if p, ok := limit[z.name]; !ok {
			c.t.Errorf("request %d: RateLimit %q has no member %q", c.req, c.h.Values("RateLimit"), z.name)
		} else {
			r := int64(z.events - admitted)
			c.intParam("RateLimit", z.name, p, "r", r, r)
			c.intParam("RateLimit", z.name, p, "t", 0, w)
		}
	}
	for name, got := range map[string]int{"RateLimit-Policy": len(policy), "RateLimit": len(limit)} {
		if want := len(zones); got != want {
			c.t.Errorf("request %d: got %d members in %s %q, want %d (one per zone)", c.req, got, name, c.h.Values(name), want)
		}
	}
}

// sfList parses a structured-field List whose members are string items
// and returns their parameters by name.
func (c headerCheck) sfList(field string) map[string]map[string]int64 {
	c.t.Helper()
	values := c.h.Values(field)
	if len(values) == 0 {
		c.t.Errorf("request %d: no %s field", c.req, field)
		return nil
	}
	list, err := headertest.ParseList(values)
	if err != nil {
		c.t.Errorf("request %d: %s: %v", c.req, field, err)
		return nil
	}
	members := map[string]map[string]int64{}
	for _, m := range list {
		if _, dup := members[m.Name]; dup {
			c.t.Errorf("request %d: %s %q: member %q appears twice", c.req, field, values, m.Name)
		}
		members[m.Name] = m.Values
	}
	return members
}

// intParam checks that parameter key of a list member is an integer in
// [lo, hi].
func (c headerCheck) intParam(field, member string, p map[string]int64, key string, lo, hi int64) {
	c.t.Helper()
	got, ok := p[key]
	if !ok {
		c.t.Errorf("request %d: %s member %q has no parameter %q (%q)", c.req, field, member, key, c.h.Values(field))
		return
	}
	if got < lo || got > hi {
		if lo == hi {
			c.t.Errorf("request %d: %s member %q: got %s=%d, want %d", c.req, field, member, key, got, lo)
		} else {
			c.t.Errorf("request %d: %s member %q: got %s=%d, want in [%d, %d]", c.req, field, member, key, got, lo, hi)
		}
	}
}

// legacy checks RateLimit-Limit/Remaining/Reset for the limiting zone.
func (c headerCheck) legacy(z headerZone, remaining int) {
	c.t.Helper()
	w := int64(z.window / time.Second)
	c.intField("RateLimit-Limit", int64(z.events), int64(z.events))
	c.intField("RateLimit-Remaining", int64(remaining), int64(remaining))
	c.intField("RateLimit-Reset", 0, w)
}

// x checks X-RateLimit-Limit/Remaining/Reset, Reset being Unix seconds.
func (c headerCheck) x(z headerZone, remaining int, sent, received time.Time) {
	c.t.Helper()
	w := int64(z.window / time.Second)
	c.intField("X-RateLimit-Limit", int64(z.events), int64(z.events))
	c.intField("X-RateLimit-Remaining", int64(remaining), int64(remaining))
	c.intField("X-RateLimit-Reset", sent.Unix(), received.Unix()+w+1)
}

// retryAfter checks Retry-After on a rejection: integer seconds, at least 1,
// at most window + window/events rounded up, and (sliding_log: the oldest
// admitted request frees its unit one window after it was admitted) never
// before the time a retry can really pass.
func (c headerCheck) retryAfter(z headerZone, sinceFirst time.Duration) {
	c.t.Helper()
	w := z.window.Seconds()
	hi := int64(w + math.Ceil(w/float64(z.events)))
	got, ok := c.intField("Retry-After", 1, hi)
	if !ok {
		return
	}
	if earliest := w - sinceFirst.Seconds(); float64(got) < earliest {
		c.t.Errorf("request %d: got Retry-After: %d, want at least %.1f (the first of the admitted requests frees its unit %v after it was sent, %v ago)",
			c.req, got, earliest, z.window, sinceFirst.Round(time.Millisecond))
	}
}

// intField checks that the field appears once and is an integer in
// [lo, hi]; it returns the value.
func (c headerCheck) intField(name string, lo, hi int64) (int64, bool) {
	c.t.Helper()
	values := c.h.Values(name)
	if len(values) != 1 {
		c.t.Errorf("request %d: got %s: %q, want one integer value", c.req, name, values)
		return 0, false
	}
	got, err := strconv.ParseInt(values[0], 10, 64)
	if err != nil {
		c.t.Errorf("request %d: got %s: %q, want an integer", c.req, name, values[0])
		return 0, false
	}
	if got < lo || got > hi {
		if lo == hi {
			c.t.Errorf("request %d: got %s: %d, want %d", c.req, name, got, lo)
		} else {
			c.t.Errorf("request %d: got %s: %d, want in [%d, %d]", c.req, name, got, lo, hi)
		}
		return got, false
	}
	return got, true
}

// TestHeadersEffectiveWindow: on a real Caddy deciding on Redis, for each
// algorithm, the RateLimit header read with httpsfv: an admission's t is
// within the window; a rejection's r=0 and t equal to Retry-After (one
// zone, no jitter), and RateLimit-Reset is t; so during a debt
// (cost_from_response charging more than the limit), where the next unit
// comes back long before the request can pass.
func TestHeadersEffectiveWindow(t *testing.T) {
	srv := redistest.Start(t)
	algs := []struct {
		name, lines string
		maxT        int64 // the latest a t may be (a debt's: 8 tokens at 15 s)
	}{
		{"fixed_window", "algorithm fixed_window\n\t\t\t\tevents 4\n\t\t\t\twindow 1m", 60},
		{"periods", "period day", 86400},
		{"sliding_window", "algorithm sliding_window\n\t\t\t\tevents 4\n\t\t\t\twindow 1m", 63},
		{"sliding_log", "algorithm sliding_log\n\t\t\t\tevents 4\n\t\t\t\twindow 1m", 60},
		{"token_bucket", "algorithm token_bucket\n\t\t\t\tevents 4\n\t\t\t\twindow 1m", 120},
	}
	var site strings.Builder
	for _, a := range algs {
		events := ""
		if a.name == "periods" {
			events = "\n\t\t\t\tevents 4"
		}
		fmt.Fprintf(&site, "\thandle /%s {\n\t\trate_limit {\n%s\t\t\theaders ietf legacy\n\t\t\tzone %s {\n\t\t\t\tkey {http.request.header.X-Key}\n\t\t\t\t%s%s\n\t\t\t\tcost_from_response {http.request.header.X-Charge}\n\t\t\t}\n\t\t}\n\t\trespond \"ok\" 200\n\t}\n",
			a.name, exactRedis(srv), a.name, a.lines, events)
	}
	site.WriteString("\trespond \"no route\" 404\n")
	caddy := startCaddy(t, caddyConfig{Site: site.String()})
	client := newClient(1)
	for _, a := range algs {
		t.Run(a.name, func(t *testing.T) {
			url := caddy.URL + "/" + a.name
			for i := range 4 {
				resp := get(t, client, url, "X-Key", "spent")
				r, tw := rateLimitMember(t, resp, a.name)
				if resp.Status != 200 || r != int64(3-i) || tw < 1 || tw > a.maxT || resp.Header.Get("Retry-After") != "" {
					t.Fatalf("request %d: got %d, r=%d t=%d, Retry-After %q; want 200, r=%d, t in [1, %d], no Retry-After",
						i+1, resp.Status, r, tw, resp.Header.Get("Retry-After"), 3-i, a.maxT)
				}
			}
			wantRejection(t, get(t, client, url, "X-Key", "spent"), a.name, 1, a.maxT)
			if resp := get(t, client, url, "X-Key", "debt", "X-Charge", "12"); resp.Status != 200 {
				t.Fatalf("charged request: got %d, want 200", resp.Status)
			}
			var resp response
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if resp = get(t, client, url, "X-Key", "debt"); resp.Status != 200 {
					break // the settlement landed: the key is in debt
				}
			}
			minT := int64(1)
			if a.name == "token_bucket" { // 8 tokens owed at 4 a minute, not the next one's 15 s
				minT = 60
			}
			wantRejection(t, resp, a.name, minT, a.maxT)
		})
	}
}

// rateLimitMember is r and t of zone's RateLimit member in resp, read
// with httpsfv.
func rateLimitMember(t *testing.T, resp response, zone string) (int64, int64) {
	t.Helper()
	members, err := headertest.ParseList(resp.Header.Values("RateLimit"))
	if err != nil || len(members) != 1 || members[0].Name != zone {
		t.Fatalf("RateLimit %q: %v, want one member %q", resp.Header.Values("RateLimit"), err, zone)
	}
	return members[0].Values["r"], members[0].Values["t"]
}

// wantRejection checks a rejection by zone alone: r=0, t in [minT, maxT]
// and equal to Retry-After and RateLimit-Reset.
func wantRejection(t *testing.T, resp response, zone string, minT, maxT int64) {
	t.Helper()
	if resp.Status != http.StatusTooManyRequests {
		t.Fatalf("got %d, want 429", resp.Status)
	}
	r, tw := rateLimitMember(t, resp, zone)
	retry, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64)
	if err != nil || r != 0 || tw != retry || tw < minT || tw > maxT || resp.Header.Get("RateLimit-Reset") != strconv.FormatInt(tw, 10) {
		t.Errorf("rejection: r=%d t=%d, Retry-After %q, RateLimit-Reset %q; want r=0, t in [%d, %d] equal to both",
			r, tw, resp.Header.Get("Retry-After"), resp.Header.Get("RateLimit-Reset"), minT, maxT)
	}
}
