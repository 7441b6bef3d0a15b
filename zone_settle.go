package sluice

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// concurrencyUnit is the quota unit of a concurrency zone's policy member
// (draft-ietf-httpapi-ratelimit-headers: qu).
const concurrencyUnit = "concurrent-requests"

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
	z.settle.lease = z.limit.Algorithm == algorithms.Concurrency
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
		return nil
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

// provisionSettle looks up the zone's settlement metrics.
func (z *Zone) provisionSettle(ctx caddy.Context) {
	z.settle.metrics = settleMetricsFor(ctx, z.name)
}

// newLease is a random lease id for a concurrency zone's request (128
// bits: no two requests share one), or "" for other zones.
func (z *Zone) newLease() string {
	if !z.settle.lease {
		return ""
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
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
