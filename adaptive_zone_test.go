package sluice

import (
	"fmt"
	"testing"
	"time"
)

// TestAdaptiveZoneStatesBeforeRequests: a zone no request has reached
// yet lists the limit its first limiter starts at (initial), not 0.
func TestAdaptiveZoneStatesBeforeRequests(t *testing.T) {
	zone := uniqueZone("shed_fresh")
	h := newHandler(t, fmt.Sprintf("rate_limit {\n\tzone %s {\n\t\tkey static\n\t\talgorithm adaptive\n\t\tevents 100\n\t\tadaptive {\n\t\t\tmin 5\n\t\t\tinitial 30\n\t\t}\n\t}\n}", zone))
	st, n := h.shedZones[0].shed.set.states(time.Now())
	if n != 0 || st.Limit != 30 || st.InFlight != 0 {
		t.Fatalf("before any request: %d limiters, %+v; want none, limit 30 (initial), nothing in flight", n, st)
	}
}
