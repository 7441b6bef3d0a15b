package sluice

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
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
	// stylePK adds the draft's partition key to each RateLimit member:
	// pk=:<base64>:, the hash that names the zone's bucket for this
	// request (never the key itself). Only with styleIETF.
	stylePK

	defaultHeaderStyles = styleIETF | styleLegacy
)

var headerStyleNames = map[string]headerStyles{
	"ietf": styleIETF, "legacy": styleLegacy, "x": styleX, "pk": stylePK, "none": 0,
}

// pkPadding pads the key hash, unpadded base64 in the store key, to the
// padded base64 that an sf-binary requires (RFC 8941, section 4.1.8).
var pkPadding = strings.Repeat("=", base64.StdEncoding.EncodedLen(hashedKeyBytes)-hashTagLen)

func parseHeaderStyles(names []string) (headerStyles, error) {
	if len(names) == 0 {
		return defaultHeaderStyles, nil
	}
	var styles headerStyles
	for _, name := range names {
		style, ok := headerStyleNames[name]
		if !ok {
			return 0, fmt.Errorf("headers: unknown style %q (want ietf, legacy, x, pk or none)", name)
		}
		if name == "none" && len(names) > 1 {
			return 0, fmt.Errorf("headers: none excludes other styles")
		}
		if styles&style != 0 {
			return 0, fmt.Errorf("headers: %s given twice", name)
		}
		styles |= style
	}
	if styles&stylePK != 0 && styles&styleIETF == 0 {
		return 0, fmt.Errorf("headers: pk needs ietf: it is a parameter of the RateLimit members")
	}
	return styles, nil
}

// concurrencyUnit is the quota unit of a concurrency zone's policy member
// (draft-ietf-httpapi-ratelimit-headers: qu).
const concurrencyUnit = "concurrent-requests"

// policyMember is a zone's RateLimit-Policy list member, e.g.
// "api";q=100;w=60. w is whole seconds, at least 1; for a token bucket q
// and w give the sustained rate; a concurrency zone's is "z";q=10;qu="concurrent-requests".
func policyMember(name string, l algorithms.Limit) string {
	return string(appendPolicy(nil, name, l))
}

// appendPolicy appends the policy member of zone name under limit l.
func appendPolicy(buf []byte, name string, l algorithms.Limit) []byte {
	buf = strconv.AppendInt(append(strconv.AppendQuote(buf, name), ";q="...), l.Events, 10)
	if l.Algorithm == algorithms.Concurrency { // requests at once: no window
		return strconv.AppendQuote(append(buf, ";qu="...), concurrencyUnit)
	}
	return strconv.AppendInt(append(buf, ";w="...), ceilSeconds(l.Window), 10)
}

// Header field names, canonical, so that setting them costs no allocation.
var (
	headerPolicy     = textproto.CanonicalMIMEHeaderKey("RateLimit-Policy")
	headerState      = textproto.CanonicalMIMEHeaderKey("RateLimit")
	headerLimit      = textproto.CanonicalMIMEHeaderKey("RateLimit-Limit")
	headerRemaining  = textproto.CanonicalMIMEHeaderKey("RateLimit-Remaining")
	headerReset      = textproto.CanonicalMIMEHeaderKey("RateLimit-Reset")
	headerXLimit     = textproto.CanonicalMIMEHeaderKey("X-RateLimit-Limit")
	headerXRemaining = textproto.CanonicalMIMEHeaderKey("X-RateLimit-Remaining")
	headerXReset     = textproto.CanonicalMIMEHeaderKey("X-RateLimit-Reset")
	headerRetryAfter = textproto.CanonicalMIMEHeaderKey("Retry-After")
)

// headerWriter collects field values in one buffer and sets them all at
// once: one string and one slice for every field. Each field starts where
// the previous one ends; its methods take and return the buffer, so that
// a buffer on the caller's stack stays there.
type headerWriter struct {
	names  [9]string
	starts [9]int
	fields int
}

// start begins field name at the buffer's end, n.
func (w *headerWriter) start(name string, n int) {
	w.names[w.fields], w.starts[w.fields] = name, n
	w.fields++
}

func (w *headerWriter) int(buf []byte, name string, n int64) []byte {
	w.start(name, len(buf))
	return strconv.AppendInt(buf, n, 10)
}

// writeAll sets the headers of styles s for v's decisions, whose requests'
// keys give pk and whose limits give q and Limit (with v.reqs nil, no pk
// and the zones' static limits), and when
// retrySeconds > 0 (a rejection) Retry-After, whatever the styles: every
// field in one buffer, so a rejection costs no more allocations than an
// admission.
func (s headerStyles) writeAll(h http.Header, v *verdict, now time.Time, retrySeconds int64) {
	var stack [256]byte
	var w headerWriter
	buf := stack[:0]
	if retrySeconds > 0 {
		buf = w.int(buf, headerRetryAfter, retrySeconds)
	}
	if s&(styleLegacy|styleX) != 0 {
		buf = s.writeLeast(&w, buf, v, now)
	}
	if s&styleIETF != 0 {
		buf = s.writeIETF(&w, buf, v)
	}
	all, values := string(buf), make([]string, w.fields)
	for i := range w.fields {
		end := len(all)
		if i+1 < w.fields {
			end = w.starts[i+1]
		}
		values[i] = all[w.starts[i]:end]
		h[w.names[i]] = values[i : i+1 : i+1]
	}
}

func (s headerStyles) writeIETF(w *headerWriter, buf []byte, v *verdict) []byte {
	zones, reqs, ds := v.zones, v.reqs, v.ds
	w.start(headerState, len(buf))
	for i, z := range zones {
		if i > 0 {
			buf = append(buf, ", "...)
		}
		if z.quoted != "" { // set up once (Zone.setup)
			buf = append(buf, z.quoted...)
		} else {
			buf = strconv.AppendQuote(buf, z.name)
		}
		buf = strconv.AppendInt(append(buf, ";r="...), max(0, ds[i].Remaining), 10)
		// t: when more quota comes back (the draft's "additional quota"), so
		// Retry-After, which waits for the retry to fit, is never earlier
		buf = strconv.AppendInt(append(buf, ";t="...), ceilSeconds(ds[i].MoreAfter), 10)
		if reqs != nil && s&stylePK != 0 {
			buf = appendPK(buf, reqs[i].Key)
		}
	}
	w.start(headerPolicy, len(buf))
	for i, z := range zones {
		if i > 0 {
			buf = append(buf, ", "...)
		}
		l := z.limit
		if reqs != nil { // the request's own limit (events <placeholder> <n>)
			l = reqs[i].Limit
		}
		buf = z.appendPolicy(buf, l, ds[i])
	}
	return buf
}

// periodSpan is the period a decision of a period zone counted in: the
// one holding the store's clock (d.At), or, for a decision without one (a
// cached denial) or a store clock beyond the periods around Caddy's, the
// one holding Caddy's clock.
func (z *Zone) periodSpan(d algorithms.Decision) algorithms.Span {
	now := time.Now()
	ps := z.periods.PeriodsAt(now)
	if span, ok := ps.At(d.At); ok {
		return span
	}
	span, _ := ps.At(now.UnixMicro())
	return span
}

// appendPolicy appends z's RateLimit-Policy member for a request under
// limit l decided as d: built once for a zone with a window and a static
// limit; q is the request's own limit; a period zone's w is the length of
// the period d counted in (23, 24 or 25 hours for a day).
func (z *Zone) appendPolicy(buf []byte, l algorithms.Limit, d algorithms.Decision) []byte {
	if z.periods == nil {
		if !z.dynamic && !d.Override.Set() {
			return append(buf, z.policy...)
		}
		return appendPolicy(buf, z.name, l)
	}
	buf = strconv.AppendQuote(buf, z.name)
	buf = strconv.AppendInt(append(buf, ";q="...), l.Events, 10)
	return strconv.AppendInt(append(buf, ";w="...), z.periodSpan(d).Seconds(), 10)
}

// appendPK appends the pk parameter of the bucket storeKey names, or
// nothing if storeKey holds no hash.
func appendPK(buf []byte, storeKey string) []byte {
	hash := keyHash(storeKey)
	if hash == "" {
		return buf
	}
	buf = append(append(buf, ";pk=:"...), hash...)
	return append(append(buf, pkPadding...), ':')
}

// now is the time the headers of styles s are written at: only the x
// style's Reset (a Unix time) reads it, so the others skip the clock.
func (s headerStyles) now() time.Time {
	if s&styleX == 0 {
		return time.Time{}
	}
	return time.Now()
}

// writeLeast writes the legacy and x fields of the zone with the least
// remaining.
func (s headerStyles) writeLeast(w *headerWriter, buf []byte, v *verdict, now time.Time) []byte {
	zones, reqs, ds := v.zones, v.reqs, v.ds
	least := 0
	for i, d := range ds {
		if d.Remaining < ds[least].Remaining {
			least = i
		}
	}
	limit, remaining := zones[least].limit.Capacity(), max(0, ds[least].Remaining)
	if reqs != nil { // the request's own limit
		limit = reqs[least].Limit.Capacity()
	}
	if s&styleLegacy != 0 {
		buf = w.int(buf, headerLimit, limit)
		buf = w.int(buf, headerRemaining, remaining)
		buf = w.int(buf, headerReset, ceilSeconds(ds[least].MoreAfter))
	}
	if s&styleX != 0 {
		buf = w.int(buf, headerXLimit, limit)
		buf = w.int(buf, headerXRemaining, remaining)
		buf = w.int(buf, headerXReset, ceilUnix(now.Add(ds[least].MoreAfter)))
	}
	return buf
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

// keyHash is the hash inside a store key, in unpadded standard base64: the
// name of the key's bucket that reveals nothing of the key but its hash
// (the `pk` of the RateLimit header). It slices the key, hashing nothing
// again; it is "" for a string storeKey did not make.
func keyHash(storeKey string) string {
	open := strings.LastIndexByte(storeKey, '{')
	if open < 0 || len(storeKey) < open+hashTagLen+2 || storeKey[open+1+hashTagLen] != '}' {
		return ""
	}
	return storeKey[open+1 : open+1+hashTagLen]
}
