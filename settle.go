package sluice

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// What happens to an admitted request after its wait (wait.go): when a
// zone counts after the response (count_status, cost_from_response,
// concurrency), its response's status is watched and the zone settles
// once the next handler is done (the status: response_status.go).

// settler is the store that settles what a request took: the store that
// decided it. inline says a settlement is a map update there, cheaper to
// run at once than on a goroutine.
type settler struct {
	store  algorithms.Store
	inline bool
}

// settler is the settler of a request decided by the local store (local:
// failure_mode local's, in the outage of the decision) or by s.
func (s *stores) settler(local bool) settler {
	if local {
		return settler{s.local.current(), true}
	}
	return settler{s.store, !s.remote}
}

// watched is an admitted request whose zones settle after its response:
// the recorder its response goes through, and the store that decided it,
// which settles it and renews its concurrency slots meanwhile.
type watched struct {
	rec     statusRecorder
	wrapper caddyhttp.ResponseWriterWrapper // rec's: one allocation for both
	to      settler
}

// watch counts and starts renewing the slots v took, and returns the
// watch of w's response.
func (h *Handler) watch(w http.ResponseWriter, v *verdict) *watched {
	slotsTaken(v, 1)
	wd := &watched{to: h.backend.shared().settler(v.failed == failLocal)}
	wd.wrapper.ResponseWriter = w
	wd.rec.ResponseWriterWrapper = &wd.wrapper
	slotRenewals.start(wd.to.store, h.logger, v.reqs, v.ds)
	return wd
}

// settleAfter settles v's zones once the next handler returned err
// (errPanicked when it panicked), having written the response wd
// recorded: its slots are no longer renewed, and the settlements of the
// zones that took quota go to the backend.
func (h *Handler) settleAfter(ctx context.Context, v *verdict, wd *watched, err error) {
	status := settledStatus(ctx, &wd.rec, err)
	slotsTaken(v, -1)
	var ss []algorithms.Settlement
	for i, z := range v.zones {
		if !v.reqs[i].Settles || !v.ds[i].Allowed {
			continue
		}
		if s, ok := z.settlement(v.repl, v.reqs[i], v.ds[i], status); ok {
			switch {
			case s.Delta < 0:
				z.settled.countRefund()
			case s.Delta > 0:
				z.settled.countDebt()
			}
			ss = append(ss, s)
		}
	}
	slotRenewals.stop(wd.to.store, v.reqs)
	if len(ss) > 0 {
		h.backend.settle(ctx, wd.to, ss)
	}
}

// slotsTaken adds n to the slots gauge (leases_held) of each concurrency
// zone of v that took a slot.
func slotsTaken(v *verdict, n float64) {
	for i, z := range v.zones {
		if z.settle.slot && v.ds[i].Allowed && v.reqs[i].Slot != "" {
			z.settled.addSlots(n)
		}
	}
}

// settledStatus is the status a response settles with: the one written,
// else, when the client left before any was written, 499 (client closed
// request; whatever error the next handler made of it), else the error's.
func settledStatus(ctx context.Context, rec *statusRecorder, err error) int {
	if rec.status == 0 && ctx.Err() != nil {
		return statusClientClosed
	}
	return rec.final(err)
}

// setupSettle derives what the zone does after the response.
func (z *Zone) setupSettle() error {
	statuses, err := parseStatuses(z.CountStatus)
	if err != nil {
		return err
	}
	z.settle.statuses = statuses
	z.settle.slot = z.limit.Algorithm.Features().InFlight
	z.settle.any = z.settle.slot || len(z.CountStatus) > 0 || z.CostFromResponse != ""
	return nil
}

// validateSettle checks the options that settle after the response.
func (z *Zone) validateSettle() error {
	if _, err := parseStatuses(z.CountStatus); err != nil {
		return err
	}
	if z.CountStatus != nil && len(z.CountStatus) == 0 {
		return fmt.Errorf("count_status: want at least one status")
	}
	if z.CostFromResponse != "" && !strings.Contains(z.CostFromResponse, "{") {
		return fmt.Errorf("cost_from_response: want a placeholder, such as {http.response.header.X-Usage-Tokens}, got %q", z.CostFromResponse)
	}
	if !z.settle.slot {
		return z.validateSettles()
	}
	switch {
	case z.Cost != "":
		return fmt.Errorf("cost: a concurrency zone counts requests in flight, one slot each; remove cost")
	case len(z.CountStatus) > 0:
		return fmt.Errorf("count_status: a concurrency zone gives every slot back after the response; remove count_status")
	case z.CostFromResponse != "":
		return fmt.Errorf("cost_from_response: a concurrency zone counts requests in flight, not their cost; remove cost_from_response")
	}
	return nil
}

// validateSettles checks that the zone's algorithm settles, when the zone
// corrects after the response (count_status, cost_from_response).
func (z *Zone) validateSettles() error {
	if (len(z.CountStatus) > 0 || z.CostFromResponse != "") && !z.limit.Algorithm.Features().Settles {
		return fmt.Errorf("count_status and cost_from_response apply only to %s, not %s",
			algorithms.NamesWith(algorithms.Features{Settles: true}), z.limit.Algorithm)
	}
	return nil
}

// provisionSettle looks up the zone's settlement metrics.
func (z *Zone) provisionSettle(registry *prometheus.Registry) {
	z.settled = settleMetricsFor(registry, z.name)
}

// settlement is what the zone corrects, once the response has status
// status, for request req decided as d; false when nothing changes.
// repl expands cost_from_response with the response's headers.
//
// A request whose client left (499) keeps what it reserved: the upstream
// may have done the work, so count_status never refunds it, and
// cost_from_response charges what the response reported if it got that
// far, else the reservation.
func (z *Zone) settlement(repl *caddy.Replacer, req algorithms.Request, d algorithms.Decision, status int) (algorithms.Settlement, bool) {
	s := algorithms.Settlement{Key: req.Key, Limit: req.Limit, At: d.At, Slot: req.Slot}
	switch {
	case !z.settle.statuses.empty() && !z.settle.statuses.has(status) && status != statusClientClosed:
		s.Delta = -req.Cost
	case z.CostFromResponse != "":
		if real, ok := z.responseCost(repl); ok {
			s.Delta = real - req.Cost
		}
	}
	return s, s.Delta != 0 || s.Slot != ""
}

// responseCost expands cost_from_response; false when it is not a
// non-negative integer (the reservation then stands).
func (z *Zone) responseCost(repl *caddy.Replacer) (int64, bool) {
	v := strings.TrimSpace(repl.ReplaceAll(z.CostFromResponse, ""))
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return min(n, 2*algorithms.MaxEvents), true // past any debt cap
}

// newSlot is a random slot id for a concurrency zone's request (128
// bits: no two requests share one), or "" for other zones.
func (z *Zone) newSlot() string {
	if !z.settle.slot {
		return ""
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
