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
	fmt.Fprintf(&site, "\thandle /headers {\n\t\trate_limit {\n%s\t\t\theaders ietf legacy x\n", redisBlock(srv))
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
