package sluice

import (
	"fmt"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// TestWaitPlaceKeysThatDelay: a request holds a key's place among the
// waiting only for a zone that may delay it, and only while it does: a
// site-wide zone beside a per-client one, a dry run (which never waits)
// or enforcing but with no delay for these requests, never fills up with
// the waiting of distinct clients, so more of them than a key holds
// (perKey) still take a place and wait.
func TestWaitPlaceKeysThatDelay(t *testing.T) {
	bucket := algorithms.Limit{Algorithm: algorithms.TokenBucket, Events: 10, Window: time.Second, MaxDelay: time.Second}
	tests := []struct {
		name   string
		dryRun bool
	}{
		{"dry-run site zone", true},
		{"enforcing site zone that delays none", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWaiting([]*Zone{{MaxDelay: caddy.Duration(time.Second)}}, false, zap.NewNop())
			clients := int(w.perKey) + 72
			places := make([]place, 0, clients)
			defer func() {
				for i := range places {
					places[i].release()
				}
			}()
			for i := range clients {
				reqs := []algorithms.Request{{Key: fmt.Sprint("ip-", i), Limit: bucket, Cost: 1},
					{Key: "site", Limit: bucket, Cost: 1, DryRun: tt.dryRun}}
				p, refused := w.take(reqs)
				if refused {
					t.Fatalf("client %d: refused a place (key site holds %d, the handler %d), want one",
						i, w.heldBy("site"), w.n.Load())
				}
				p.keepDelayed([]algorithms.Decision{{Allowed: true, Delay: time.Second}, {Allowed: true}})
				places = append(places, p)
			}
			if got, want := w.heldBy("site"), int64(0); got != want {
				t.Errorf("places of key site: got %d, want %d", got, want)
			}
			if got, want := w.heldBy("ip-0"), int64(1); got != want {
				t.Errorf("places of key ip-0 (its zone delays it): got %d, want %d", got, want)
			}
			if got, want := w.n.Load(), int64(clients); got != want {
				t.Errorf("handler places: got %d, want %d (one per waiting request)", got, want)
			}
			for i := range places {
				places[i].release()
			}
			if got, want := w.n.Load(), int64(0); got != want {
				t.Errorf("handler places after release: got %d, want %d", got, want)
			}
			if got, want := w.heldBy("ip-0"), int64(0); got != want {
				t.Errorf("places of key ip-0 after release: got %d, want %d", got, want)
			}
		})
	}
}
