package integration_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestQuotaLeaseReloadLowersLimit: two instances under load from one
// flood, both reloaded mid-window to half the limit before that many
// were admitted, admit exactly the new limit in that window: every unit
// the old config's leases give back is credited to the window (none
// refused), and none is lost. (Give-backs refused under load once left
// 9,894 units of 30,000 never admitted.) failure_mode closed and a long
// timeout: a slow answer on a busy machine shows as a 503, never as a
// hidden admission.
func TestQuotaLeaseReloadLowersLimit(t *testing.T) {
	srv := redistest.Start(t)
	const (
		before, after = 4000, 2000
		window        = 6 * time.Second
		rate          = 800.0 // requests a second: after the reload, more than the window has left
		reloadAt      = 1500 * time.Millisecond
		workers       = 32
	)
	site := func(events int) string {
		return fmt.Sprintf(`	rate_limit {
%s		failure_mode closed
		zone halved {
			key static
			algorithm fixed_window
			events %d
			window %v
		}
	}
	respond "ok" 200`, redisBlock(srv, "timeout 2s"), events, window)
	}
	instances := []*caddyProc{startCaddy(t, caddyConfig{Site: site(before)}), startCaddy(t, caddyConfig{Site: site(before)})}
	urls := []string{instances[0].URL + "/", instances[1].URL + "/"}
	w := window.Microseconds()
	start := time.UnixMicro((time.Now().UnixMicro()/w + 1) * w)
	time.Sleep(time.Until(start.Add(50 * time.Millisecond))) // off the edge: the client's clock is not Redis's
	var wg sync.WaitGroup
	wg.Go(func() {
		time.Sleep(time.Until(start.Add(reloadAt)))
		for _, c := range instances {
			loadCaddyfile(t, c, reloadCaddyfile(t, c, caddyConfig{Site: site(after)}))
		}
	})
	results := pacedTraffic(newClient(workers), urls, rate, window-150*time.Millisecond, workers)
	wg.Wait()
	var admitted, beforeReload, lost int
	byStatus := map[int]int{}
	for _, r := range results {
		if r.err != nil {
			// a reload closes the old server's idle connections: a request
			// sent on one as it closes is reset (its answer, if any, lost)
			lost++
			continue
		}
		byStatus[r.status]++
		if r.status == http.StatusOK {
			admitted++
			if time.UnixMicro(r.recv).Before(start.Add(reloadAt)) {
				beforeReload++
			}
		}
	}
	if beforeReload >= after {
		t.Fatalf("%d admitted before the reload: the test needs fewer than %d", beforeReload, after)
	}
	if most := len(instances) * workers; lost > most {
		t.Errorf("%d requests lost their connection, want at most %d (one per connection a reload closes)", lost, most)
	}
	if admitted > after || admitted+lost < after { // exactly after, but for answers a closed connection lost
		t.Errorf("admitted in the window: got %d (and %d answers lost), want exactly %d (statuses %v, %d before the reload)", admitted, lost, after, byStatus, beforeReload)
	}
	for i, c := range instances {
		units := leaseUnits(t, c, "halved")
		t.Logf("instance %d: %v", i, units)
		if units.refused != 0 {
			t.Errorf("instance %d: %d units given back and refused, want none", i, units.refused)
		}
		if units.granted <= 0 {
			t.Errorf("instance %d: no lease granted: the test proves nothing of leases", i)
		}
	}
}
