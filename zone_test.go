package sluice

import (
	"net/http"
	"testing"
)

// Tests of a zone's own options through the handler: cost (static and from
// a placeholder) and dry_run on one zone.

func TestServeHTTPStaticCost(t *testing.T) {
	zone := uniqueZone("cost")
	h := newHandler(t, rateLimit(logZone(zone, 5, "1h", "cost 3")))
	first := serve(t, h, reqOpts{})
	if !first.allowed() {
		t.Fatalf("first request: err %v, next %d; want allowed", first.err, first.next)
	}
	if got := remaining(t, first, zone); got != 2 {
		t.Errorf("first request: r = %d, want 2", got)
	}
	second := serve(t, h, reqOpts{})
	wantDenied(t, second, http.StatusTooManyRequests)
	if got := remaining(t, second, zone); got != 2 {
		t.Errorf("denied request: r = %d, want 2 (a denial consumes nothing)", got)
	}
}

func TestServeHTTPPlaceholderCost(t *testing.T) {
	tests := []struct {
		name      string
		cost      *string // X-Cost header; nil: absent
		allowed   bool
		remaining int64 // r after the request, events 5
	}{
		{"two", ptr("2"), true, 3},
		{"not a number", ptr("abc"), true, 4},
		{"negative", ptr("-4"), true, 4},
		{"zero", ptr("0"), true, 4},
		{"empty", ptr(""), true, 4},
		{"absent", nil, true, 4},
		{"above the limit", ptr("999999"), false, 5},
		{"exactly the limit", ptr("5"), true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			zone := uniqueZone("pcost")
			h := newHandler(t, rateLimit(logZone(zone, 5, "1h", "cost {http.request.header.X-Cost}")))
			o := reqOpts{headers: map[string]string{}}
			if tt.cost != nil {
				o.headers["X-Cost"] = *tt.cost
			}
			res := serve(t, h, o)
			if got := res.allowed(); got != tt.allowed {
				t.Errorf("allowed = %v (err %v), want %v", got, res.err, tt.allowed)
			}
			if !tt.allowed {
				wantDenied(t, res, http.StatusTooManyRequests)
			}
			if got := remaining(t, res, zone); got != tt.remaining {
				t.Errorf("r = %d, want %d", got, tt.remaining)
			}
			// What the request took shows on the next request of cost 1.
			after := serve(t, h, reqOpts{})
			if got, want := remaining(t, after, zone), tt.remaining-1; after.allowed() && got != want {
				t.Errorf("next request of cost 1: r = %d, want %d", got, want)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func TestServeHTTPZoneDryRun(t *testing.T) {
	dry, enforced := uniqueZone("zdry"), uniqueZone("zenf")
	h := newHandler(t, rateLimit(logZone(dry, 1, "1h", "dry_run"), logZone(enforced, 3, "1h")))
	for i := range 3 {
		res := serve(t, h, reqOpts{})
		if !res.allowed() {
			t.Fatalf("request %d: err %v, next %d; want allowed (the dry-run zone never denies)", i, res.err, res.next)
		}
		if got, want := remaining(t, res, enforced), int64(2-i); got != want {
			t.Errorf("request %d: %s r = %d, want %d", i, enforced, got, want)
		}
		if got := remaining(t, res, dry); got != 0 {
			t.Errorf("request %d: %s r = %d, want 0", i, dry, got)
		}
	}
	res := serve(t, h, reqOpts{})
	wantDenied(t, res, http.StatusTooManyRequests)
	if got := res.repl.ReplaceAll("{http.rate_limit.exceeded.name}", ""); got != enforced {
		t.Errorf("{http.rate_limit.exceeded.name} = %q, want %q (the enforced zone)", got, enforced)
	}
}
