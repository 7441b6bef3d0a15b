package sluice

import (
	"net/http"
	"strings"
	"testing"
)

// Tests of a zone's own options through the handler: dry_run on one zone
// (its cost: zone_request_test.go).

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

// zoneBlock is a rate_limit directive with one zone of the given lines.
func settleZone(lines ...string) string {
	return "rate_limit {\n\tzone z {\n\t\t" + strings.Join(lines, "\n\t\t") + "\n\t}\n}"
}
