package redisstore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// zoneReplyWidth is how many values the decide code returns per zone:
// 2 × remaining + allowed (one value), retry after, reset, more. Each
// request's zones are followed by its now. Every value is a little-endian
// double (exact: an integer below 2^53), the requests' values one after
// another in one string (see decide.lua).
const zoneReplyWidth = 4

// sendBatch decides batch in one round trip: one call for all of it on a
// standalone or Sentinel Redis; on Cluster one call per slot, pipelined
// (each request's keys share a slot: Store.run splits the others).
// Order holds within a call, and requests in different slots share no key.
// When a slot's call is sent again while the slot moves, the requests of
// the calls already answered are answered first, and the batcher hands on
// its next batch (e), so one slot's move delays its own requests and the
// batch leader's (whose caller sends the call, and returns when it does:
// at most slotRetryBudget later). A call none of whose slots was answered
// keeps its place in flight.
func (s *Store) sendBatch(ctx context.Context, batch []*pending, e *early) {
	groups := [][]*pending{batch}
	if _, ok := s.client.(*redis.ClusterClient); ok && len(batch) > 1 {
		groups = bySlot(batch)
	}
	calls := make([]*call, len(groups))
	for i, g := range groups {
		calls[i] = encode(g)
	}
	var answered []bool // the groups answered while others were retried
	s.runner.run(ctx, calls, func(again []*call) {
		if answered == nil {
			answered = make([]bool, len(calls))
		}
		for i, c := range calls {
			if !answered[i] && !slices.Contains(again, c) {
				answered[i] = true
				decodeGroup(groups[i], c)
				e.answer(groups[i])
			}
		}
		if slices.Contains(answered, true) { // else the whole call retries: it keeps its place in flight
			e.handOn()
		}
	})
	for i, g := range groups {
		if answered == nil || !answered[i] {
			decodeGroup(g, calls[i])
		}
	}
}

// decodeGroup hands each request of g its part of c's reply, or c's error.
func decodeGroup(g []*pending, c *call) {
	if err := decode(g, c); err != nil {
		for _, p := range g {
			p.err = err
		}
	}
}

// encode builds the call deciding batch in order: per request one string
// (decide.lua reads it once and remembers it), its fields separated by
// spaces: its mode, now and zone count, then its zones' fields; "" for a
// string the same as the request before's (Redis's cost of an argument
// grows with its length). A concurrency slot id holds no space (Sluice's
// are hex). The strings are slices of one string, the batch's buffer
// copied once: a request costs no string of its own.
func encode(batch []*pending) *call {
	zones := 0
	for _, p := range batch {
		zones += p.zones()
	}
	c := &call{keys: make([]string, 0, zones), args: make([]string, len(batch))}
	var endsBuf [maxBatchRequests]int // where each request's string ends in b
	ends := endsBuf[:0]
	if len(batch) > len(endsBuf) {
		ends = make([]int, 0, len(batch))
	}
	buf := encodeBuffers.Get().(*[]byte)
	b := (*buf)[:0]
	for _, p := range batch {
		b = append(b, p.mode...)
		leasing := p.leasing()
		if leasing {
			b = append(b, 'q')
		}
		b = append(append(b, ' '), p.now...)
		b = strconv.AppendInt(append(b, ' '), int64(p.zones()), 10)
		for _, r := range p.reqs {
			c.keys = append(c.keys, r.Key)
			b = zoneFields{algorithmArg(r), r.Limit, r.Cost, dryRunArg(r.DryRun), slotArg(r.Limit, r.Slot), maxDelayArg(r)}.appendTo(b)
		}
		for _, st := range p.ss {
			c.keys = append(c.keys, st.Key)
			b = zoneFields{string(st.Limit.Algorithm), st.Limit, st.Delta, strconv.FormatInt(st.At, 10), slotArg(st.Limit, st.Slot), 0}.appendTo(b)
		}
		for _, g := range p.gbs { // a refund of its units
			c.keys = append(c.keys, g.Key)
			b = zoneFields{string(g.Limit.Algorithm), g.Limit, -g.Units, strconv.FormatInt(g.At, 10), slotArg(g.Limit, ""), 0}.appendTo(b)
		}
		if leasing {
			b = appendQuotaFields(b, p)
		}
		ends = append(ends, len(b))
	}
	all, start, prev := string(b), 0, ""
	for i, end := range ends {
		s := all[start:end]
		if i > 0 && s == prev {
			c.args[i] = ""
		} else {
			c.args[i] = s
		}
		start, prev = end, s
	}
	if cap(b) <= maxEncodeBuffer {
		*buf = b
		encodeBuffers.Put(buf)
	}
	return c
}

// encodeBuffers are the buffers encode builds a batch's strings in,
// before copying them into one string: reused, so that a batch costs one
// string, not a buffer too. One that grew past maxEncodeBuffer (a batch
// of long concurrency slot ids) is left to the collector.
var encodeBuffers = sync.Pool{New: func() any { return new([]byte) }}

const maxEncodeBuffer = 16 << 10

// zoneFields are one zone's fields in a request's string: algorithm,
// events, window, burst, cost, dry run, slot, max_delay (µs; ZONE_ARGS in
// request.lua). A settlement sends its delta for the cost and its
// reservation's time for the dry run.
type zoneFields struct {
	alg       string
	l         algorithms.Limit
	cost      int64
	dry, slot string
	maxDelay  int64
}

// appendTo appends the fields to b, each after a space.
func (z zoneFields) appendTo(b []byte) []byte {
	b = append(append(b, ' '), z.alg...)
	b = strconv.AppendInt(append(b, ' '), z.l.Events, 10)
	b = strconv.AppendInt(append(b, ' '), z.l.Window.Microseconds(), 10)
	b = strconv.AppendInt(append(b, ' '), z.l.Capacity(), 10)
	b = strconv.AppendInt(append(b, ' '), z.cost, 10)
	b = append(append(b, ' '), z.dry...)
	b = append(append(b, ' '), z.slot...)
	return strconv.AppendInt(append(b, ' '), z.maxDelay, 10)
}

// decode hands each request of batch its part of c's reply: its zones'
// values and its time, or the error reply it failed with. The reply is
// one string of every request's values, or, when a request of several
// failed, one string or error per request.
func decode(batch []*pending, c *call) error {
	if c.err != nil {
		return fmt.Errorf("running decide script: %w", scriptError(c.err)) // a call of one request fails whole
	}
	switch reply := c.reply.(type) {
	case string:
		for i, p := range batch {
			n := (replyWidth(p) + 1) * 8
			if len(reply) < n {
				return fmt.Errorf("decide script: reply ends at request %d of %d", i+1, len(batch))
			}
			decodeRequest(p, reply[:n])
			reply = reply[n:]
		}
		if len(reply) != 0 {
			return fmt.Errorf("decide script: %d bytes past the last request", len(reply))
		}
	case []any:
		if len(reply) != len(batch) {
			return fmt.Errorf("decide script: %d replies for %d requests", len(reply), len(batch))
		}
		for i, p := range batch {
			switch v := reply[i].(type) {
			case error:
				p.err = fmt.Errorf("decide script, request %d of %d: %w", i+1, len(batch), scriptError(v))
			case string:
				if len(v) != (replyWidth(p)+1)*8 {
					return fmt.Errorf("decide script, request %d of %d: %d bytes", i+1, len(batch), len(v))
				}
				decodeRequest(p, v)
			default:
				return fmt.Errorf("decide script, request %d of %d: got %T", i+1, len(batch), v)
			}
		}
	default:
		return fmt.Errorf("decide script: got %T, want a string", c.reply)
	}
	return nil
}

// decodeRequest reads p's decisions from its values (doubles, the last
// its now).
func decodeRequest(p *pending, b string) {
	n := len(b) / 8
	var stack [16]int64 // a request of up to 3 zones: no allocation
	v := stack[:0]
	for i := range n {
		v = append(v, int64(math.Float64frombits(le64(b[8*i:]))))
	}
	if p.mode == modeSettle {
		p.taken = make([]bool, n-1)
		for i := range p.taken {
			p.taken[i] = v[i] == 1
		}
		return
	}
	p.ds = decisions(p.reqs, v[:n-1], v[n-1])
}

// le64 is the little-endian uint64 at the start of b.
func le64(b string) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// replyWidth is how many values p's zones take in the reply (a settlement
// returns none, but a call of give-backs one per give-back: whether it
// was taken; its time follows).
func replyWidth(p *pending) int {
	if p.mode == modeSettle {
		if p.leasing() {
			return len(p.ss) + len(p.gbs)
		}
		return 0
	}
	n := zoneReplyWidth * len(p.reqs)
	for i := range p.reqs {
		if p.reqs[i].Overrides {
			n += overrideReplyWidth
		}
		if p.reqs[i].Bans() {
			n += banReplyWidth
		}
		if p.reqs[i].ReadsLeases() {
			n += quotaReplyWidth
		}
	}
	return n
}

// banReplyWidth is how many more values a zone with a ban returns: 0 not
// banned, 1 banned, 2 banned by this call.
const banReplyWidth = 1

// BanKey is the Redis key of the ban of the state at key: beside it, in
// the same hash tag (so the same Cluster slot), named after the key
// without its state format (algorithms.StateBase), so that a ban outlives
// a change of format. It holds the ban's end in µs of Redis's clock and
// expires then.
func BanKey(key string) string { return algorithms.StateBase(key) + ":b" }

// formatBanKey is the name earlier releases gave the ban of the state at key:
// after the state key, format included. The decide code still reads it
// when BanKey holds none, and Reset deletes it.
func formatBanKey(key string) string { return key + ":b" }

// overrideReplyWidth is how many more values a zone with overrides
// returns: the events and burst by override (0 and 0 when none is).
const overrideReplyWidth = 2

// overrideAlgorithms are the algorithm arguments of zones with overrides:
// the name with ":o", built once for each algorithm of the table that has
// overrides.
var overrideAlgorithms = func() map[algorithms.Algorithm]string {
	m := make(map[algorithms.Algorithm]string)
	for _, s := range algorithms.Specs() {
		if s.Overrides {
			m[s.Name] = string(s.Name) + ":o"
		}
	}
	return m
}()

// algorithmArg is r's algorithm as the decide code takes it: its name,
// with ":o" for a zone with overrides (which then reads its key's override
// and replies with two more values), then ":b" and the ban in seconds for
// a zone with a ban (which reads and sets its key's ban and replies with
// one more value). A dry-run zone never bans: it sends no ban.
func algorithmArg(r algorithms.Request) string {
	if r.Bans() {
		return banAlgorithmArg(r)
	}
	if r.Overrides {
		if s, ok := overrideAlgorithms[r.Limit.Algorithm]; ok {
			return s
		}
		return string(r.Limit.Algorithm) + ":o"
	}
	return string(r.Limit.Algorithm)
}

// banAlgorithmArg is algorithmArg of a zone with a ban: one short string
// per decision of such a zone (zones without a ban build none).
func banAlgorithmArg(r algorithms.Request) string {
	b := make([]byte, 0, 32)
	b = append(b, r.Limit.Algorithm...)
	if r.Overrides {
		b = append(b, ":o"...)
	}
	b = strconv.AppendInt(append(b, ":b"...), int64(r.BanSeconds), 10)
	return string(b)
}

// OverrideKey is the Redis key of the override of the state at key: beside
// it, in the same hash tag (so the same Cluster slot), named after the key
// without its state format (algorithms.StateBase), so that an override
// outlives a change of format.
func OverrideKey(key string) string { return algorithms.StateBase(key) + ":o" }

// formatOverrideKey is the name earlier releases gave the override of the
// state at key: after the state key, format included. The decide code still
// reads it when OverrideKey holds none; SetOverride and ClearOverride
// delete it.
func formatOverrideKey(key string) string { return key + ":o" }

// decisions reads one request's zones from v.
func decisions(reqs []algorithms.Request, v []int64, at int64) []algorithms.Decision {
	if len(v) == 0 {
		return nil
	}
	ds := make([]algorithms.Decision, len(reqs))
	for i := range ds {
		z := v
		v = v[zoneReplyWidth:]
		if reqs[i].Overrides {
			ds[i].Override = algorithms.Override{Events: int32(v[0]), Burst: int32(v[1])} // each at most MaxEvents
			v = v[overrideReplyWidth:]
		}
		var ban int64
		if reqs[i].Bans() {
			ban = v[0]
			v = v[banReplyWidth:]
		}
		var quota algorithms.QuotaGrant
		if reqs[i].ReadsLeases() {
			quota = algorithms.QuotaGrant{Units: v[0], End: v[1], Generation: v[2], ID: v[3], Out: v[4], Takers: v[5]}
			v = v[quotaReplyWidth:]
		}
		ds[i] = algorithms.Decision{
			Quota:      quota,
			Banned:     ban != 0,
			BanStarted: ban == 2,
			Override:   ds[i].Override,
			Allowed:    z[0]&1 == 1,
			Remaining:  z[0] >> 1, // arithmetic: a debt's negative remaining too
			ResetAfter: time.Duration(z[2]) * time.Microsecond,
			MoreAfter:  time.Duration(z[3]) * time.Microsecond,
			At:         at,
		}
		ds[i].RetryAfter, ds[i].Delay = algorithms.RetryOrDelay(ds[i].Allowed, z[1]) // an admission's retry is its delay
	}
	return ds
}

// dryRunArg is a zone's dry run as the decide code takes it.
func dryRunArg(dryRun bool) string {
	if dryRun {
		return "1"
	}
	return "0"
}

// slotArg is the decide script's slot argument: the request's
// concurrency slot id, or for a calendar zone its period boundaries (the
// window is then 0). A zone with a window sends its slot ("" but on
// concurrency), as it always has.
func slotArg(l algorithms.Limit, slot string) string {
	if !l.HasPeriod() {
		return slot
	}
	ps := l.Periods
	b := make([]byte, 0, 4*17)
	b = strconv.AppendInt(b, ps.PrevStart, 10)
	b = strconv.AppendInt(append(b, ','), ps.Start, 10)
	b = strconv.AppendInt(append(b, ','), ps.End, 10)
	b = strconv.AppendInt(append(b, ','), ps.NextEnd, 10)
	return string(b)
}

// scriptError is a request's error reply as an error: the store's clock
// outside a calendar zone's periods is algorithms.ErrClockSkew.
func scriptError(err error) error {
	if strings.Contains(err.Error(), algorithms.ErrClockSkew.Error()) {
		return fmt.Errorf("%w (%v)", algorithms.ErrClockSkew, err)
	}
	return err
}

// maxDelayArg is r's max_delay in µs as the decide script takes it: 0 when
// unset, for algorithms without max_delay, and for a dry-run zone.
func maxDelayArg(r algorithms.Request) int64 {
	return r.AppliedMaxDelay().Microseconds()
}

// The dispatcher's modes.
const (
	modeConsume = "1"
	modePeek    = "0"
	modeSettle  = "settle"
)

// firstKey is the first key p reaches (its slot on Cluster).
func (p *pending) firstKey() string {
	switch {
	case len(p.reqs) > 0:
		return p.reqs[0].Key
	case len(p.ss) > 0:
		return p.ss[0].Key
	}
	return p.gbs[0].Key
}

// zones is how many zones p reaches: its requests', settlements' or
// give-backs'.
func (p *pending) zones() int { return len(p.reqs) + len(p.ss) + len(p.gbs) }

// settles reports whether p settles or gives back, rather than decides.
func (p *pending) settles() bool { return p.ss != nil || p.gbs != nil }
