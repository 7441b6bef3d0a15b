package sluice

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// headerStyles is a set of rate-limit header styles: bit i is
// headerStyleTable[i].
type headerStyles uint8

// The styles' bits, in headerStyleTable's order.
const (
	styleIETF headerStyles = 1 << iota
	styleLegacy
	styleX
	stylePK

	defaultHeaderStyles = styleIETF | styleLegacy
)

// listFields names what a style of the IETF draft writes: a state field
// with one member per zone (what it may take now, its effective window,
// and with pk the partition key) and a policy field (its quota and
// window, or the quota's unit for a concurrency zone). Parameters keep
// their ';' and '=', field names are canonical.
type listFields struct {
	state, policy                       string
	available, window, partition        string
	quota, policyWindow, unit, unitName string
}

// countFields names what a style of three Integer fields writes, for the
// zone with the least remaining: its limit, remaining and reset, the
// reset in seconds from now or, with unixReset, as a Unix time.
type countFields struct {
	limit, remaining, reset string
	unixReset               bool
}

// headerStyle is one style: its name in the Caddyfile, and the fields it
// writes (list or count), or neither for a modifier of the list styles.
type headerStyle struct {
	name  string
	list  *listFields
	count *countFields
}

// draft11Fields are draft-ietf-httpapi-ratelimit-headers-11's (the wire
// format of -10): RateLimit: "api";r=42;t=18 with r the available quota
// and t the effective window, and RateLimit-Policy: "api";q=100;w=60.
var draft11Fields = &listFields{
	state: canonical("RateLimit"), policy: canonical("RateLimit-Policy"),
	available: ";r=", window: ";t=", partition: ";pk=",
	quota: ";q=", policyWindow: ";w=", unit: ";qu=", unitName: "concurrent-requests",
}

// headerStyleTable is where every style is defined, in its bit's order:
// the writer knows nothing of their names, so a later draft's names
// become a style of their own with one entry here.
var headerStyleTable = [...]headerStyle{
	{name: "ietf", list: draft11Fields},
	{name: "legacy", count: &countFields{ // seconds
		limit: canonical("RateLimit-Limit"), remaining: canonical("RateLimit-Remaining"), reset: canonical("RateLimit-Reset"),
	}},
	{name: "x", count: &countFields{ // Unix seconds, GitHub's convention
		limit: canonical("X-RateLimit-Limit"), remaining: canonical("X-RateLimit-Remaining"), reset: canonical("X-RateLimit-Reset"),
		unixReset: true,
	}},
	{name: "pk"}, // the partition key on each member of the list styles
}

// listStyles are the styles that write list fields: pk needs one.
var listStyles = func() headerStyles {
	var s headerStyles
	for i, st := range headerStyleTable {
		if st.list != nil {
			s |= 1 << i
		}
	}
	return s
}()

// canonical is name as net/http keys it, so that setting it costs no
// allocation.
func canonical(name string) string { return textproto.CanonicalMIMEHeaderKey(name) }

var headerRetryAfter = canonical("Retry-After")

// pkPadding pads the key hash, unpadded base64 in the store key, to the
// padded base64 that an sf-binary requires (RFC 8941, section 4.1.8).
var pkPadding = strings.Repeat("=", base64.StdEncoding.EncodedLen(hashedKeyBytes)-hashTagLen)

func parseHeaderStyles(names []string) (headerStyles, error) {
	if len(names) == 0 {
		return defaultHeaderStyles, nil
	}
	if slices.Contains(names, "none") {
		if len(names) > 1 {
			return 0, fmt.Errorf("headers: none excludes other styles")
		}
		return 0, nil
	}
	var styles headerStyles
	for _, name := range names {
		style, ok := styleNamed(name)
		if !ok {
			return 0, fmt.Errorf("headers: unknown style %q (want %s or none)", name, styleNames())
		}
		if styles&style != 0 {
			return 0, fmt.Errorf("headers: %s given twice", name)
		}
		styles |= style
	}
	if styles&stylePK != 0 && styles&listStyles == 0 {
		return 0, fmt.Errorf("headers: pk needs ietf: it is a parameter of the RateLimit members")
	}
	return styles, nil
}

// styleNamed is the style of the Caddyfile's name.
func styleNamed(name string) (headerStyles, bool) {
	for i, st := range headerStyleTable {
		if st.name == name {
			return 1 << i, true
		}
	}
	return 0, false
}

// styleNames lists the styles' names, e.g. "ietf, legacy, x, pk".
func styleNames() string {
	names := make([]string, len(headerStyleTable))
	for i, st := range headerStyleTable {
		names[i] = st.name
	}
	return strings.Join(names, ", ")
}

// policyMember is a zone's RateLimit-Policy list member, e.g.
// "api";q=100;w=60. w is whole seconds, at least 1; for a token bucket q
// and w give the sustained rate; a concurrency zone's is "z";q=10;qu="concurrent-requests".
func policyMember(name string, l algorithms.Limit) string {
	return string(draft11Fields.appendPolicy(nil, name, l))
}

// appendPolicy appends the policy member of zone name under limit l.
func (f *listFields) appendPolicy(buf []byte, name string, l algorithms.Limit) []byte {
	buf = strconv.AppendInt(append(strconv.AppendQuote(buf, name), f.quota...), l.Events, 10)
	if l.Algorithm.Features().InFlight { // requests at once: no window
		return strconv.AppendQuote(append(buf, f.unit...), f.unitName)
	}
	return strconv.AppendInt(append(buf, f.policyWindow...), ceilSeconds(l.Window), 10)
}

// maxHeaderFields bounds the fields one response gets: Retry-After and
// every style's (9 today), with room for more styles.
const maxHeaderFields = 16

// headerWriter collects field values in one buffer and sets them all at
// once: one string and one slice for every field. Each field starts where
// the previous one ends; its methods take and return the buffer, so that
// a buffer on the caller's stack stays there.
type headerWriter struct {
	names  [maxHeaderFields]string
	starts [maxHeaderFields]int
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
	least := -1
	for i := range headerStyleTable {
		st := &headerStyleTable[i]
		switch {
		case s&(1<<i) == 0:
		case st.count != nil:
			if least < 0 {
				least = leastZone(v, retrySeconds)
			}
			buf = st.count.write(&w, buf, v, least, now, retrySeconds)
		case st.list != nil:
			buf = st.list.write(&w, buf, v, s&stylePK != 0, retrySeconds)
		}
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

// write writes f's two fields for v, each member's partition key with pk;
// retrySeconds is the rejection's Retry-After (0 on an admission).
func (f *listFields) write(w *headerWriter, buf []byte, v *verdict, pk bool, retrySeconds int64) []byte {
	zones, reqs, ds := v.zones, v.reqs, v.ds
	w.start(f.state, len(buf))
	for i, z := range zones {
		if i > 0 {
			buf = append(buf, ", "...)
		}
		if z.quoted != "" { // set up once (Zone.setup)
			buf = append(buf, z.quoted...)
		} else {
			buf = strconv.AppendQuote(buf, z.name)
		}
		buf = strconv.AppendInt(append(buf, f.available...), max(0, ds[i].Remaining), 10)
		buf = strconv.AppendInt(append(buf, f.window...), ceilSeconds(v.memberWindow(i, retrySeconds)), 10)
		if reqs != nil && pk {
			buf = appendPK(buf, f.partition, reqs[i].Key)
		}
	}
	w.start(f.policy, len(buf))
	for i, z := range zones {
		if i > 0 {
			buf = append(buf, ", "...)
		}
		l := z.limit
		if reqs != nil { // the request's own limit (events <placeholder> <n>)
			l = reqs[i].Limit
		}
		buf = z.appendPolicy(buf, f, l, ds[i])
	}
	return buf
}

// effectiveWindow is t, draft -11's effective window of zone decision d:
// the time within which the client can take no more than r, the
// remaining floored at 0, and that Retry-After is never earlier than.
//   - A zone that admitted: until r grows, its MoreAfter (a reservation's
//     is until r is 1 again).
//   - A zone that denied with r > 0 (a cost above r): until r grows, never
//     later than its retry.
//   - A zone that denied with r = 0 (spent, in debt, banned, full): until
//     the request could pass here, its RetryAfter, which a debt's
//     MoreAfter (until it is one unit smaller) would come long before.
//
// A dry-run zone never rejects, so it is written as a zone that admitted:
// its t is its MoreAfter, never when it would let the request through.
func effectiveWindow(d algorithms.Decision, dryRun bool) time.Duration {
	switch {
	case d.Allowed || dryRun:
		return d.MoreAfter
	case d.Remaining > 0:
		return min(d.MoreAfter, d.RetryAfter)
	default:
		return d.RetryAfter
	}
}

// memberWindow is t of zone i of v: its effective window
// (a dry-run zone's as if it admitted), and on a rejection (retrySeconds >
// 0) a dry-run zone's never past the Retry-After, which only enforcing
// zones set: no t asks a client to wait longer for a zone that does not
// enforce.
func (v *verdict) memberWindow(i int, retrySeconds int64) time.Duration {
	dryRun := v.zones[i].DryRun || v.reqs != nil && v.reqs[i].DryRun
	t := effectiveWindow(v.ds[i], dryRun)
	if dryRun && retrySeconds > 0 {
		t = min(t, time.Duration(retrySeconds)*time.Second)
	}
	return t
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

// appendPolicy appends z's policy member in fields f for a request under
// limit l decided as d: built once for a zone with a window and a static
// limit (draft11Fields'); q is the request's own limit (its class's share
// on a concurrency zone with priority); a period zone's w is
// the length of the period d counted in (23, 24 or 25 hours for a day).
func (z *Zone) appendPolicy(buf []byte, f *listFields, l algorithms.Limit, d algorithms.Decision) []byte {
	if z.periods == nil {
		if f == draft11Fields && !z.dynamic && z.classes.n() < 2 && !d.Override.Set() && z.policy != "" {
			return append(buf, z.policy...)
		}
		return f.appendPolicy(buf, z.name, l)
	}
	buf = strconv.AppendQuote(buf, z.name)
	buf = strconv.AppendInt(append(buf, f.quota...), l.Events, 10)
	return strconv.AppendInt(append(buf, f.policyWindow...), z.periodSpan(d).Seconds(), 10)
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

// appendPK appends the partition parameter param of the bucket storeKey
// names, or nothing if storeKey holds no hash.
func appendPK(buf []byte, param, storeKey string) []byte {
	hash := keyHash(storeKey)
	if hash == "" {
		return buf
	}
	buf = append(append(append(buf, param...), ':'), hash...)
	return append(append(buf, pkPadding...), ':')
}

// now is the time the headers of styles s are written at: only a Reset
// that is a Unix time (the x style's) reads it, so the others skip the
// clock.
func (s headerStyles) now() time.Time {
	for i, st := range headerStyleTable {
		if s&(1<<i) != 0 && st.count != nil && st.count.unixReset {
			return time.Now()
		}
	}
	return time.Time{}
}

// leastZone is the index of the zone the count styles report: the least
// remaining (floored at 0, as sent), and of those the longest effective
// window, so that a client that waits Reset is not refused again by
// another spent zone.
func leastZone(v *verdict, retrySeconds int64) int {
	least := 0
	for i, d := range v.ds {
		r, lr := max(0, d.Remaining), max(0, v.ds[least].Remaining)
		if r < lr || r == lr && v.memberWindow(i, retrySeconds) > v.memberWindow(least, retrySeconds) {
			least = i
		}
	}
	return least
}

// write writes f's three fields for zone least of v, on a rejection with
// Retry-After retrySeconds (else 0).
func (f *countFields) write(w *headerWriter, buf []byte, v *verdict, least int, now time.Time, retrySeconds int64) []byte {
	d := v.ds[least]
	limit, remaining := v.zones[least].limit.Capacity(), max(0, d.Remaining)
	if v.reqs != nil { // the request's own limit
		limit = v.reqs[least].Limit.Capacity()
	}
	buf = w.int(buf, f.limit, limit)
	buf = w.int(buf, f.remaining, remaining)
	reset := v.memberWindow(least, retrySeconds)
	if f.unixReset {
		return w.int(buf, f.reset, ceilUnix(now.Add(reset)))
	}
	return w.int(buf, f.reset, ceilSeconds(reset))
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

// memberBuf holds, on the stack, the verdict withMembers builds for the
// headers of a request with a few zones.
type memberBuf struct {
	zones [6]*Zone
	reqs  [6]algorithms.Request
	ds    [6]algorithms.Decision
}

// writeHeaders writes the request's headers of styles s: v's, with
// retrySeconds as writeAll, and a member for each adaptive zone whose
// slot the request holds (withMembers); without one, v's alone, at no
// cost. None of v's zones when failure_mode passed the request
// undecided (no decisions) or refused it (err, the backend's); only the
// shedding zone's when one shed it (shedding.member), none when its client
// left while it waited.
func (hs *heldSlots) writeHeaders(s headerStyles, h http.Header, v *verdict, retrySeconds int64, err error) {
	switch {
	case hs.wasShed():
		if !hs.shed.left {
			only := hs.shed.member()
			s.writeAll(h, &only, s.now(), 1)
		}
	case !hs.held():
		if v.ds != nil {
			s.writeAll(h, v, s.now(), retrySeconds)
		}
	case v.ds != nil || err == nil:
		var buf memberBuf
		members := hs.withMembers(v, &buf)
		s.writeAll(h, &members, s.now(), retrySeconds)
	}
}

// member is a verdict of the shedding zone alone, for its headers, as a
// concurrency zone's: q the request's class's share, r what is left of
// it, t and Retry-After 1 s (a slot comes back whenever a response ends).
func (sh shedding) member() verdict {
	d := algorithms.Decision{Remaining: int64(sh.remaining), MoreAfter: time.Second, RetryAfter: time.Second}
	return verdict{
		zones: []*Zone{sh.z},
		reqs:  []algorithms.Request{{Limit: algorithms.Limit{Algorithm: algorithms.Concurrency, Events: int64(sh.share)}, DryRun: sh.z.DryRun}},
		ds:    []algorithms.Decision{d},
	}
}

// withMembers is v for its headers with a member for each adaptive zone
// whose slot the request holds, in name order among v's zones: q its
// class's share, r what was left of it once the slot was taken (v's own
// zones are left out when it has no decisions: failure_mode passed the
// request undecided), on buf's arrays.
func (hs *heldSlots) withMembers(v *verdict, buf *memberBuf) verdict {
	var own verdict
	if v.ds != nil {
		own = verdict{zones: v.zones, reqs: v.reqs, ds: v.ds}
		if own.reqs == nil {
			own.reqs = make([]algorithms.Request, len(own.zones))
			for i, z := range own.zones {
				own.reqs[i] = algorithms.Request{Limit: z.limit, DryRun: z.DryRun}
			}
		}
	}
	zones, reqs, ds := buf.zones[:0], buf.reqs[:0], buf.ds[:0]
	i := 0
	for _, s := range hs.list {
		for ; i < len(own.zones) && own.zones[i].name < s.z.name; i++ {
			zones, reqs, ds = append(zones, own.zones[i]), append(reqs, own.reqs[i]), append(ds, own.ds[i])
		}
		d := algorithms.Decision{Remaining: int64(s.slot.Remaining()), Allowed: true}
		if d.Remaining == 0 {
			d.MoreAfter = time.Second
		}
		r := algorithms.Request{Limit: algorithms.Limit{Algorithm: algorithms.Concurrency, Events: int64(s.slot.Share)}, DryRun: s.z.DryRun}
		zones, reqs, ds = append(zones, s.z), append(reqs, r), append(ds, d)
	}
	for ; i < len(own.zones); i++ {
		zones, reqs, ds = append(zones, own.zones[i]), append(reqs, own.reqs[i]), append(ds, own.ds[i])
	}
	return verdict{zones: zones, reqs: reqs, ds: ds, repl: v.repl}
}
