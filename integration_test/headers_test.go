package integration_test

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// headerZone is one zone of a headers test case. All use sliding_log, which
// is exact and does not change with time during a test that lasts seconds.
type headerZone struct {
	name   string
	events int
	window time.Duration
}

// TestHeaders checks the ietf, legacy and x header styles, alone and
// together, on allowed and rejected responses, and Retry-After on every
// rejection.
func TestHeaders(t *testing.T) {
	srv := redistest.Start(t)
	tests := []struct {
		name    string
		headers string // the `headers` option; "" leaves the default
		zones   []headerZone
		ietf    bool
		legacy  bool
		x       bool
	}{
		{
			name:    "ietf_legacy_x_two_zones",
			headers: "ietf legacy x",
			zones:   []headerZone{{"api", 5, time.Minute}, {"global", 10, 2 * time.Minute}},
			ietf:    true, legacy: true, x: true,
		},
		{
			name:  "default_is_ietf_legacy",
			zones: []headerZone{{"dflt", 2, time.Minute}},
			ietf:  true, legacy: true,
		},
		{
			name:    "ietf_only",
			headers: "ietf",
			zones:   []headerZone{{"ietfonly", 3, 30 * time.Second}},
			ietf:    true,
		},
		{
			name:    "legacy_only",
			headers: "legacy",
			zones:   []headerZone{{"legacyonly", 2, 30 * time.Second}},
			legacy:  true,
		},
		{
			name:    "x_only",
			headers: "x",
			zones:   []headerZone{{"xonly", 2, time.Minute}},
			x:       true,
		},
		{
			name:    "none",
			headers: "none",
			zones:   []headerZone{{"noneonly", 2, time.Minute}},
		},
	}

	// One Caddy, one route per case.
	var site strings.Builder
	for _, tt := range tests {
		fmt.Fprintf(&site, "\thandle /%s {\n\t\trate_limit {\n%s", tt.name, redisBlock(srv))
		if tt.headers != "" {
			fmt.Fprintf(&site, "\t\t\theaders %s\n", tt.headers)
		}
		for _, z := range tt.zones {
			fmt.Fprintf(&site, "\t\t\tzone %s {\n\t\t\t\tkey static\n\t\t\t\talgorithm sliding_log\n\t\t\t\tevents %d\n\t\t\t\twindow %s\n\t\t\t}\n",
				z.name, z.events, z.window)
		}
		site.WriteString("\t\t}\n\t\trespond \"ok\" 200\n\t}\n")
	}
	site.WriteString("\trespond \"no route\" 404\n")
	caddy := startCaddy(t, caddyConfig{Site: site.String()})
	client := newClient(1)

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			limiting := tt.zones[0] // the zone with the fewest events
			for _, z := range tt.zones {
				if z.events < limiting.events {
					limiting = z
				}
			}
			// Two rejections after the limit: the first must not consume
			// anything that changes the second.
			n := limiting.events + 2
			var first time.Time
			for i := range n {
				sent := time.Now()
				if i == 0 {
					first = sent
				}
				resp := get(t, client, caddy.URL+"/"+tt.name)
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
				if tt.ietf {
					c.ietf(tt.zones, admitted)
				} else {
					c.absent("RateLimit", "RateLimit-Policy")
				}
				if tt.legacy {
					c.legacy(limiting, limiting.events-admitted)
				} else {
					c.absent("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset")
				}
				if tt.x {
					c.x(limiting, limiting.events-admitted, sent, received)
				} else {
					c.absent("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")
				}
				if !allowed {
					c.retryAfter(limiting, received.Sub(first))
				}
			}
		})
	}
}

// headerCheck checks the rate limit headers of one response.
type headerCheck struct {
	t   *testing.T
	req int // 1-based request number, for messages
	h   http.Header
}

// absent reports any of the named fields that is present.
func (c headerCheck) absent(names ...string) {
	c.t.Helper()
	for _, name := range names {
		if got := c.h.Values(name); len(got) > 0 {
			c.t.Errorf("request %d: got %s: %q, want no such field", c.req, name, got)
		}
	}
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
func (c headerCheck) sfList(field string) map[string]*httpsfv.Params {
	c.t.Helper()
	values := c.h.Values(field)
	if len(values) == 0 {
		c.t.Errorf("request %d: no %s field", c.req, field)
		return nil
	}
	list, err := httpsfv.UnmarshalList(values)
	if err != nil {
		c.t.Errorf("request %d: %s %q is not a structured-field List: %v", c.req, field, values, err)
		return nil
	}
	members := map[string]*httpsfv.Params{}
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		if !ok {
			c.t.Errorf("request %d: %s %q: got member %#v, want an item", c.req, field, values, m)
			continue
		}
		name, ok := item.Value.(string)
		if !ok {
			c.t.Errorf("request %d: %s %q: got member value %#v (%T), want a string", c.req, field, values, item.Value, item.Value)
			continue
		}
		if _, dup := members[name]; dup {
			c.t.Errorf("request %d: %s %q: member %q appears twice", c.req, field, values, name)
		}
		members[name] = item.Params
	}
	return members
}

// intParam checks that parameter key of a list member is an integer in
// [lo, hi].
func (c headerCheck) intParam(field, member string, p *httpsfv.Params, key string, lo, hi int64) {
	c.t.Helper()
	v, ok := p.Get(key)
	if !ok {
		c.t.Errorf("request %d: %s member %q has no parameter %q (%q)", c.req, field, member, key, c.h.Values(field))
		return
	}
	got, ok := v.(int64)
	if !ok {
		c.t.Errorf("request %d: %s member %q: got %s=%#v (%T), want an integer", c.req, field, member, key, v, v)
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
