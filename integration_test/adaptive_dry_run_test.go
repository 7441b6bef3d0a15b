package integration_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestAdaptiveDryRun: a dry_run adaptive zone sheds nothing and queues
// nothing, but counts what it would have shed (outcome dry_run_shed) and
// its limit still adapts. Under /pinned, a limit pinned at 2: four
// requests held at once all reach the upstream, two counted admitted and
// two dry_run_shed, four in flight. Under /load, an upstream of 8
// workers, 25 ms each, and 32 clients at once: the latency passes
// tolerance × baseline and the limit falls under its start, while every
// request is served.
func TestAdaptiveDryRun(t *testing.T) {
	withoutRedis(t)
	hold := startHoldUpstream(t)
	capacity := startCapacityUpstream(t, 8, 25*time.Millisecond)
	caddy := startCaddy(t, caddyConfig{Global: "\tmetrics", Site: fmt.Sprintf(`	handle /pinned {
		rate_limit {
			zone pinned {
				key static
				algorithm adaptive
				events 2
				max_delay 30s
				dry_run
			}
		}
		reverse_proxy %s
	}
	handle /load {
		rate_limit {
			zone load {
				key static
				algorithm adaptive
				events 64
				adaptive {
					initial 32
				}
				dry_run
			}
		}
		reverse_proxy %s
	}`, hold.addr(), capacity.addr())})
	client := newClient(40)

	var held []*pending
	for i := range 4 {
		held = append(held, send(t.Context(), client, caddy.URL+"/pinned", fmt.Sprintf("held-%d", i)))
		hold.waitArrived(t) // at the upstream within 10s: not shed, not queued for max_delay
	}
	if st := zoneState(t, caddy, "pinned"); st.Limit != 2 || st.InFlight != 4 {
		t.Errorf("pinned: %+v, want limit 2 and 4 in flight (dry run takes every slot)", st)
	}
	for outcome, want := range map[string]int{"admitted": 2, "dry_run_shed": 2, "shed": 0, "delayed": 0} {
		if got := decisions(t, caddy, "pinned", "", outcome); got != want {
			t.Errorf("pinned: decisions %s: %d, want %d", outcome, got, want)
		}
	}
	hold.releaseAll()
	for _, p := range held {
		if res := p.wait(t); res.Status != http.StatusOK {
			t.Errorf("%s: status %d, want 200", p.tag, res.Status)
		}
	}
	waitInFlight(t, caddy, "pinned", 0)

	// the limit adapts
	calm := startClassTraffic(client, caddy.URL+"/load", map[string]int{"any": 4}, 20*time.Millisecond)
	waitBaseline(t, caddy, "load")
	calm.stop()
	tr := startClassTraffic(client, caddy.URL+"/load", map[string]int{"any": 32}, 20*time.Millisecond)
	waitUntil(t, 15*time.Second, "the limit under its start of 32, and requests counted dry_run_shed", func() (bool, string) {
		st := zoneState(t, caddy, "load")
		n := decisions(t, caddy, "load", "", "dry_run_shed")
		return st.Limit < 32 && n > 0, fmt.Sprintf("%+v, %d dry_run_shed", st, n)
	})
	tr.stop()
	counts := tr.snapshot()
	if all, ok := total(counts, "any", http.StatusOK); all == 0 || ok != all || tr.errors > 0 {
		t.Errorf("load: answers %v, %d errors: want every request served", counts["any"], tr.errors)
	}
	if got := decisions(t, caddy, "load", "", "shed"); got != 0 {
		t.Errorf("load: decisions shed: %d, want 0", got)
	}
}
