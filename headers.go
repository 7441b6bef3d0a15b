package sluice

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// headerStyles is a set of rate-limit header styles.
type headerStyles uint8

const (
	// styleIETF: draft-ietf-httpapi-ratelimit-headers-10, RateLimit-Policy
	// and RateLimit, one list member per zone.
	styleIETF headerStyles = 1 << iota
	// styleLegacy: RateLimit-Limit, -Remaining and -Reset (seconds), for the
	// zone with the least remaining.
	styleLegacy
	// styleX: X-RateLimit-Limit, -Remaining and -Reset (Unix seconds).
	styleX

	defaultHeaderStyles = styleIETF | styleLegacy
)

var headerStyleNames = map[string]headerStyles{
	"ietf": styleIETF, "legacy": styleLegacy, "x": styleX, "none": 0,
}

func parseHeaderStyles(names []string) (headerStyles, error) {
	if len(names) == 0 {
		return defaultHeaderStyles, nil
	}
	var styles headerStyles
	for _, name := range names {
		style, ok := headerStyleNames[name]
		if !ok {
			return 0, fmt.Errorf("headers: unknown style %q (want ietf, legacy, x or none)", name)
		}
		if name == "none" && len(names) > 1 {
			return 0, fmt.Errorf("headers: none excludes other styles")
		}
		styles |= style
	}
	return styles, nil
}

// policyMember is a zone's RateLimit-Policy list member, e.g.
// "api";q=100;w=60. w is whole seconds, at least 1; for a token bucket q
// and w give the sustained rate.
func policyMember(name string, l algorithms.Limit) string {
	return strconv.Quote(name) + ";q=" + strconv.FormatInt(l.Events, 10) +
		";w=" + strconv.FormatInt(ceilSeconds(l.Window), 10)
}

// write sets the headers of styles s for decisions ds of zones. Zones left
// undecided (a cached denial of another zone decided) are left out.
func (s headerStyles) write(h http.Header, zones []*Zone, ds []algorithms.Decision, now time.Time) {
	if s&styleIETF != 0 {
		policy, state := make([]byte, 0, 32*len(zones)), make([]byte, 0, 32*len(zones))
		for i, z := range zones {
			if ds[i].Undecided {
				continue
			}
			if len(state) > 0 {
				policy, state = append(policy, ", "...), append(state, ", "...)
			}
			policy = append(policy, z.policy...)
			state = strconv.AppendQuote(state, z.name)
			state = strconv.AppendInt(append(state, ";r="...), max(0, ds[i].Remaining), 10)
			state = strconv.AppendInt(append(state, ";t="...), ceilSeconds(ds[i].ResetAfter), 10)
		}
		h.Set("RateLimit-Policy", string(policy))
		h.Set("RateLimit", string(state))
	}
	if s&(styleLegacy|styleX) == 0 {
		return
	}
	least := -1
	for i, d := range ds {
		if !d.Undecided && (least < 0 || d.Remaining < ds[least].Remaining) {
			least = i
		}
	}
	limit := strconv.FormatInt(zones[least].limit.Capacity(), 10)
	remaining := strconv.FormatInt(max(0, ds[least].Remaining), 10)
	reset := ceilSeconds(ds[least].ResetAfter)
	if s&styleLegacy != 0 {
		h.Set("RateLimit-Limit", limit)
		h.Set("RateLimit-Remaining", remaining)
		h.Set("RateLimit-Reset", strconv.FormatInt(reset, 10))
	}
	if s&styleX != 0 {
		h.Set("X-RateLimit-Limit", limit)
		h.Set("X-RateLimit-Remaining", remaining)
		h.Set("X-RateLimit-Reset", strconv.FormatInt(ceilUnix(now.Add(ds[least].ResetAfter)), 10))
	}
}

// writeRetryAfter sets Retry-After to retry in whole seconds, rounded up and
// at least 1, plus up to jitter×retry of random time; it returns the value
// sent.
func writeRetryAfter(h http.Header, retry time.Duration, jitter float64) time.Duration {
	if jitter > 0 {
		retry += time.Duration(rand.Float64() * jitter * float64(retry))
	}
	seconds := max(1, ceilSeconds(retry))
	h.Set("Retry-After", strconv.FormatInt(seconds, 10))
	return time.Duration(seconds) * time.Second
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// ceilUnix is t in Unix seconds, rounded up.
func ceilUnix(t time.Time) int64 {
	if t.Nanosecond() > 0 {
		return t.Unix() + 1
	}
	return t.Unix()
}
