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
				p.keepDelayed([]algorithms.Decision{{Allowed: true, Delay: time.Second}, {Allowed: true}}, false)
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

// TestWaitPlaceKeysThatDelayLocal: under failure_mode local (Redis down),
// a request keeps a key's waiting place only for the zones that delay it,
// as on Redis: a site-wide zone beside a per-client one does not cap the
// clients waiting at once at what one key holds (defaultMaxWaitingPerKey).
func TestWaitPlaceKeysThatDelayLocal(t *testing.T) {
	redis := block("redis", "url redis://127.0.0.1:1", "timeout 50ms")
	h := newHandler(t, rateLimit(redis, "failure_mode local",
		zoneCfg(uniqueZone("local_client"), "key {http.request.header.X-Key}", "algorithm token_bucket", "events 1", "window 10s", "burst 1", "max_delay 20s"),
		zoneCfg(uniqueZone("local_site"), "key site", "algorithm token_bucket", "events 100000", "window 1s", "max_delay 1s")))
	var waiting []verdict // the second request of each client, delayed by its own zone
	defer func() {
		for i := range waiting {
			waiting[i].place.release()
		}
	}()
	clients := defaultMaxWaitingPerKey + 12
	for c := range clients {
		for n := range 2 {
			req, _ := benchRequest(fmt.Sprint("client-", c), "192.0.2.1")
			v, err := matchOf(h, req)
			if err == nil {
				v, err = h.backend.decide(req.Context(), v)
			}
			if err != nil || v.failed != failLocal {
				t.Fatalf("client %d: err %v, failed %q; want failure_mode local's decision", c, err, v.failed)
			}
			if n == 0 { // the first takes the bucket's one unit
				v.place.release()
				continue
			}
			if v.denied {
				t.Fatalf("client %d of %d: its delayed request was denied (key site holds %d places)",
					c+1, clients, h.backend.(*redisBackend).waiting.heldBy(v.reqs[1].Key))
			}
			waiting = append(waiting, v)
		}
	}
}
