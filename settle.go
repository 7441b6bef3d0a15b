package sluice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// What happens to an admitted request after its wait (wait.go): when a
// zone counts after the response (count_status, cost_from_response,
// concurrency), its response's status is watched and the zone settles
// once the next handler is done.

// settler is the store that settles what a request took: the store that
// decided it. inline says a settlement is a map update there, cheaper to
// run at once than on a goroutine.
type settler struct {
	store  algorithms.Settler
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
// which settles it and renews its leases meanwhile.
type watched struct {
	rec statusRecorder
	to  settler
}

// watch counts and starts renewing the leases v took, and returns the
// watch of w's response.
func (h *Handler) watch(w http.ResponseWriter, v *verdict) *watched {
	leasesTaken(v, 1)
	wd := &watched{to: h.backend.shared().settler(v.local)}
	wd.rec.ResponseWriterWrapper = &caddyhttp.ResponseWriterWrapper{ResponseWriter: w}
	leaseRenewals.start(wd.to.store, h.logger, v.reqs, v.ds)
	return wd
}

// settleAfter settles v's zones once the next handler returned err
// (errPanicked when it panicked), having written the response wd
// recorded: its leases are no longer renewed, and the settlements of the
// zones that took quota go to the backend.
func (h *Handler) settleAfter(ctx context.Context, v *verdict, wd *watched, err error) {
	status := settledStatus(ctx, &wd.rec, err)
	leasesTaken(v, -1)
	var ss []algorithms.Settlement
	for i, z := range v.zones {
		if !v.reqs[i].Settles || !v.ds[i].Allowed {
			continue
		}
		if s, ok := z.settlement(v.repl, v.reqs[i], v.ds[i], status); ok {
			z.settle.metrics.count(s)
			ss = append(ss, s)
		}
	}
	leaseRenewals.stop(wd.to.store, v.reqs)
	if len(ss) > 0 {
		h.backend.settle(ctx, wd.to, ss)
	}
}

// leasesTaken adds n to the leases gauge of each concurrency zone of v
// that took a lease.
func leasesTaken(v *verdict, n float64) {
	for i, z := range v.zones {
		if z.settle.lease && v.ds[i].Allowed && v.reqs[i].Lease != "" {
			z.settle.metrics.leases.Add(n)
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

// zoneSettle is what a zone does after the response, derived in setup.
type zoneSettle struct {
	any      bool          // the zone settles at all
	statuses statusSet     // count_status; empty: every status counts
	lease    bool          // algorithm concurrency
	metrics  settleMetrics // set in provisionSettle
}

// statusSet is a set of HTTP status codes 100 to 599.
type statusSet [10]uint64

func (s *statusSet) add(code int) { s[code/64] |= 1 << (code % 64) }
func (s *statusSet) has(code int) bool {
	return code >= 0 && code < 640 && s[code/64]&(1<<(code%64)) != 0
}
func (s *statusSet) empty() bool { return *s == statusSet{} }
func (s *statusSet) addRange(low, high int) {
	for c := low; c <= high; c++ {
		s.add(c)
	}
}

// parseStatuses reads count_status values: codes 100 to 599, or classes
// 1xx to 5xx.
func parseStatuses(values []string) (statusSet, error) {
	var set statusSet
	for _, v := range values {
		if len(v) == 3 && strings.HasSuffix(strings.ToLower(v), "xx") && v[0] >= '1' && v[0] <= '5' {
			class := int(v[0]-'0') * 100
			set.addRange(class, class+99)
			continue
		}
		code, err := strconv.Atoi(v)
		if err != nil || code < 100 || code > 599 {
			return set, fmt.Errorf("count_status: want status codes 100 to 599 or classes 1xx to 5xx, got %q", v)
		}
		set.add(code)
	}
	return set, nil
}

// setupSettle derives what the zone does after the response.
func (z *Zone) setupSettle() error {
	statuses, err := parseStatuses(z.CountStatus)
	if err != nil {
		return err
	}
	z.settle.statuses = statuses
	z.settle.lease = z.limit.Algorithm.Features().InFlight
	z.settle.any = z.settle.lease || len(z.CountStatus) > 0 || z.CostFromResponse != ""
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
	if !z.settle.lease {
		return z.validateSettles()
	}
	switch {
	case z.Cost != "":
		return fmt.Errorf("cost: a concurrency zone counts requests in flight, one lease each; remove cost")
	case len(z.CountStatus) > 0:
		return fmt.Errorf("count_status: a concurrency zone gives every lease back after the response; remove count_status")
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
func (z *Zone) provisionSettle(ctx caddy.Context) {
	z.settle.metrics = settleMetricsFor(ctx, z.name)
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
	s := algorithms.Settlement{Key: req.Key, Limit: req.Limit, At: d.At, Lease: req.Lease}
	switch {
	case !z.settle.statuses.empty() && !z.settle.statuses.has(status) && status != statusClientClosed:
		s.Delta = -req.Cost
	case z.CostFromResponse != "":
		if real, ok := z.responseCost(repl); ok {
			s.Delta = real - req.Cost
		}
	}
	return s, s.Delta != 0 || s.Lease != ""
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

// statusRecorder notes the status of the response it passes through,
// without buffering: writes and flushes go straight on.
type statusRecorder struct {
	*caddyhttp.ResponseWriterWrapper
	status int // the final status written; 0 until then
}

// errPanicked stands for the error of a handler that panicked: its status
// is what it wrote, else 500.
var errPanicked = errors.New("handler panicked")

// WriteHeader notes the final status: 2xx to 5xx, or 101 (an upgrade, such
// as a WebSocket); other 1xx are interim.
func (w *statusRecorder) WriteHeader(status int) {
	if w.status == 0 && (status >= 200 || status == http.StatusSwitchingProtocols) {
		w.status = status
	}
	w.ResponseWriterWrapper.WriteHeader(status)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriterWrapper.Write(b)
}

func (w *statusRecorder) ReadFrom(r io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriterWrapper.ReadFrom(r)
}

// Flush sends what is buffered (an implicit 200 if no status was written).
func (w *statusRecorder) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriterWrapper.ResponseWriter).Flush()
}

// final is the response's status, once the next handler returned err:
// what was written, else the error's status (Caddy's error routes answer
// with it), else 200, as net/http sends for a handler that wrote nothing.
func (w *statusRecorder) final(err error) int {
	if w.status != 0 {
		return w.status
	}
	if err == nil {
		return http.StatusOK
	}
	var he caddyhttp.HandlerError
	if errors.As(err, &he) && he.StatusCode != 0 {
		return he.StatusCode
	}
	return http.StatusInternalServerError
}

// Interface guards
var (
	_ http.ResponseWriter = (*statusRecorder)(nil)
	_ http.Flusher        = (*statusRecorder)(nil)
)
