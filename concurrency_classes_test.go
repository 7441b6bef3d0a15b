package sluice

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestConcurrencyClassesMemory: on the embedded store, a concurrency
// zone's classes each hold up to their share of events.
func TestConcurrencyClassesMemory(t *testing.T) {
	testConcurrencyClasses(t, "")
}

// TestConcurrencyClassesRedis: the same on Redis, where the share is the
// limit the store's script counts slots against.
func TestConcurrencyClassesRedis(t *testing.T) {
	srv := redistest.Start(t)
	testConcurrencyClasses(t, "\tredis {\n\t\turl "+srv.URL()+"\n\t}\n")
}

// testConcurrencyClasses: events 5, reserve 40%, classes critical bulk:
// bulk may hold 3 in flight (floor(5 × 0.6)), critical all 5; each
// answer's RateLimit-Policy q is its class's share.
func testConcurrencyClasses(t *testing.T, redis string) {
	zone := uniqueZone("classes")
	h := newHandler(t, fmt.Sprintf("rate_limit {\n%s\tzone %s {\n\t\tkey static\n\t\talgorithm concurrency\n\t\tevents 5\n\t\tpriority {http.request.header.X-Tier} critical bulk\n\t\treserve 40%%\n\t}\n}", redis, zone))
	policy := func(q int) string { return fmt.Sprintf(`%q;q=%d;qu="concurrent-requests"`, zone, q) }
	bulk, critical := map[string]string{"X-Tier": "bulk"}, map[string]string{"X-Tier": "critical"}
	release := make(chan struct{})
	var held []*call
	hold := func(headers map[string]string) *call {
		t.Helper()
		c := start(h, t.Context(), headers, release, ok200)
		select {
		case <-c.entered:
		case <-c.done:
			t.Fatalf("request %v refused (status %d), want it admitted", headers, c.status())
		}
		held = append(held, c)
		return c
	}
	refused := func(headers map[string]string, q int) {
		t.Helper()
		c := start(h, t.Context(), headers, release, ok200)
		<-c.done
		if c.status() != http.StatusTooManyRequests {
			t.Fatalf("request %v: status %d, want 429", headers, c.status())
		}
		if got := c.rec.Header().Get("RateLimit-Policy"); got != policy(q) {
			t.Errorf("request %v refused: RateLimit-Policy %q, want %q", headers, got, policy(q))
		}
	}
	for range 3 {
		hold(bulk)
	}
	refused(bulk, 3)                // bulk's share is full
	refused(map[string]string{}, 3) // no class: the last
	hold(critical)
	hold(critical)
	refused(critical, 5)
	close(release)
	for _, c := range held {
		<-c.done
		if c.status() != http.StatusOK {
			t.Errorf("held request answered %d, want 200", c.status())
		}
	}
	for _, c := range held[3:] {
		if got := c.rec.Header().Get("RateLimit-Policy"); got != policy(5) {
			t.Errorf("critical request admitted: RateLimit-Policy %q, want %q", got, policy(5))
		}
	}
	if got := held[0].rec.Header().Get("RateLimit-Policy"); got != policy(3) {
		t.Errorf("bulk request admitted: RateLimit-Policy %q, want %q", got, policy(3))
	}
	// every slot given back (settled in the background): bulk passes again
	settling.Wait()
	again := make(chan struct{})
	close(again)
	c := start(h, t.Context(), bulk, again, ok200)
	<-c.done
	if c.status() != http.StatusOK {
		t.Errorf("bulk after the releases: status %d, want 200", c.status())
	}
}

// TestConcurrencyClassesAgree: declarations of one concurrency zone
// with other classes or another reserve disagree, naming the option.
func TestConcurrencyClassesAgree(t *testing.T) {
	mk := func(reserve float64, classes ...string) *Zone {
		z := &Zone{Key: "k", Algorithm: "concurrency", MaxEvents: 10, PriorityClasses: classes}
		if len(classes) > 0 {
			z.Priority = "{tier}"
		}
		if reserve > 0 {
			z.Reserve = &reserve
		}
		if err := z.setup("agree_classes"); err != nil {
			t.Fatal(err)
		}
		return z
	}
	if err := agree(mk(0, "a", "b"), mk(0.2, "a", "b")); err != nil {
		t.Errorf("the default reserve and 20%%: %v", err)
	}
	for _, tt := range []struct {
		name   string
		z      *Zone
		option string
	}{
		{"other classes", mk(0, "a", "b", "c"), "priority"},
		{"no classes", mk(0), "priority"},
		{"another reserve", mk(0.3, "a", "b"), "reserve 30% here"},
	} {
		if err := agree(tt.z, mk(0, "a", "b")); err == nil || !strings.Contains(err.Error(), tt.option) {
			t.Errorf("%s: %v, want an error naming %s", tt.name, err, tt.option)
		}
	}
}
