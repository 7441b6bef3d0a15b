package integration_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/caddy-sluice/internal/redistest"
)

// TestQuotaLeaseRemainingTracksFleet: one client alone on a key,
// alternating between two instances that lease it, reads r as the limit
// less what the fleet admitted in the window (the truth): never more than
// a tenth of the limit over it, never over it once it is under a tenth,
// and on each instance never rising within a fixed window. (An
// instance's r was Redis's remaining at its own last grant, blind to the
// other's grants since: 186 with 1 unit left; and a give-back raised it
// within a window.)
func TestQuotaLeaseRemainingTracksFleet(t *testing.T) {
	srv := redistest.Start(t)
	const (
		events  = 3000
		window  = 2 * time.Second
		windows = 3
		edge    = 20 * time.Millisecond // responses this near a window's edge are skipped: the client's clock is not Redis's
	)
	site := fmt.Sprintf(`	rate_limit {
%s		failure_mode closed
		headers legacy
		zone fleet_r {
			key static
			algorithm fixed_window
			events %d
			window %v
		}
	}
	respond "ok" 200`, redisBlock(srv, "timeout 2s"), events, window)
	urls := []string{startCaddy(t, caddyConfig{Site: site}).URL + "/", startCaddy(t, caddyConfig{Site: site}).URL + "/"}
	client := newClient(2)
	w := window.Microseconds()
	time.Sleep(time.Until(time.UnixMicro((time.Now().UnixMicro()/w + 1) * w)))
	end := time.Now().Add(windows * window)
	admitted := map[int64]int64{}       // by window: what the fleet admitted
	shown := [2]map[int64]int64{{}, {}} // by instance and window: the least r read
	var leasedAnswers, checked, over int
	var worst int64 // the most r was over the truth
	for i := 0; time.Now().Before(end); i++ {
		target := i % 2
		sent := time.Now()
		resp, err := doGet(client, urls[target])
		recv := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		win := sent.UnixMicro() / w
		if resp.Status == 200 {
			admitted[win]++
		}
		if recv.UnixMicro()/w != win || sent.Sub(time.UnixMicro(win*w)) < edge || time.UnixMicro((win+1)*w).Sub(recv) < edge {
			continue // near an edge: which window counted it is the store's to say
		}
		r, err := strconv.ParseInt(resp.Header.Get("RateLimit-Remaining"), 10, 64)
		if err != nil {
			t.Fatalf("request %d: RateLimit-Remaining %q: %v", i, resp.Header.Get("RateLimit-Remaining"), err)
		}
		truth := events - admitted[win]
		checked++
		worst = max(worst, r-truth)
		if r > truth+events/10 || truth < events/10 && r > truth {
			over++
			if over <= 5 {
				t.Errorf("request %d (instance %d, status %d): r=%d, truth %d (limit %d)", i, target, resp.Status, r, truth, events)
			}
		}
		if last, ok := shown[target][win]; ok && r > last {
			t.Errorf("request %d: instance %d's r rose within a window, %d → %d", i, target, last, r)
		}
		shown[target][win] = r
		if resp.Status == 200 && r != truth {
			leasedAnswers++ // only a leased answer strays from the truth with one client
		}
	}
	if over > 5 {
		t.Errorf("%d answers of %d over the bound", over, checked)
	}
	t.Logf("%d answers checked; admitted per window %v; %d answers differed from the truth, r at most %d over it", checked, admitted, leasedAnswers, worst)
	if leasedAnswers == 0 {
		t.Error("no answer differed from the truth: no lease was used, the test proves nothing")
	}
}
