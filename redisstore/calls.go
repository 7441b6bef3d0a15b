package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// zoneReplyWidth is how many values the decide code returns per zone:
// 2 × remaining + allowed (one integer: each costs Redis ~950 instructions
// to reply, a third of a GET), retry after, reset, more. Each request's
// zones are followed by its now.
const zoneReplyWidth = 4

// zoneArgs is how many arguments each zone passes: algorithm, events,
// window, burst, cost, dry run, lease, max_delay (µs; ZONE_ARGS in
// decide.lua); a settlement passes its delta for the cost and its
// reservation's time for the dry run.
const zoneArgs = 8

// sendBatch decides batch in one round trip: one call for all of it on a
// standalone or Sentinel Redis; on Cluster one call per slot, pipelined
// (each request's keys share a slot: Store.run splits the others).
// Order holds within a call, and requests in different slots share no key.
func (s *Store) sendBatch(ctx context.Context, batch []*pending) {
	groups := [][]*pending{batch}
	if _, ok := s.client.(*redis.ClusterClient); ok && len(batch) > 1 {
		groups = bySlot(batch)
	}
	calls := make([]*call, len(groups))
	for i, g := range groups {
		calls[i] = encode(g)
	}
	s.runner.run(ctx, calls)
	for i, g := range groups {
		if err := decode(g, calls[i]); err != nil {
			for _, p := range g {
				p.err = err
			}
		}
	}
}

// encode builds the call deciding batch in order: the request count, then
// per request its mode, now and zone count and its zones' arguments.
func encode(batch []*pending) *call {
	zones := 0
	for _, p := range batch {
		zones += len(p.reqs) + len(p.ss)
	}
	c := &call{keys: make([]string, 0, zones), args: make([]any, 0, 1+3*len(batch)+zoneArgs*zones)}
	c.args = append(c.args, len(batch))
	for _, p := range batch {
		c.args = append(c.args, p.mode, p.now, len(p.reqs)+len(p.ss))
		for _, r := range p.reqs {
			c.keys = append(c.keys, r.Key)
			c.args = append(c.args, algorithmArg(r), r.Limit.Events,
				r.Limit.Window.Microseconds(), r.Limit.Capacity(), r.Cost, dryRunArg(r.DryRun), leaseArg(r.Limit, r.Lease), maxDelayArg(r))
		}
		for _, st := range p.ss {
			c.keys = append(c.keys, st.Key)
			c.args = append(c.args, string(st.Limit.Algorithm), st.Limit.Events,
				st.Limit.Window.Microseconds(), st.Limit.Capacity(), st.Delta, st.At, leaseArg(st.Limit, st.Lease), 0)
		}
	}
	return c
}

// decode hands each request of batch its part of c's reply: its zones'
// values and its time, or the error reply it failed with.
func decode(batch []*pending, c *call) error {
	if c.err != nil {
		return fmt.Errorf("running decide script: %w", c.err)
	}
	reply := c.reply
	for i, p := range batch {
		if len(reply) > 0 {
			if err, ok := reply[0].(error); ok {
				p.err = fmt.Errorf("decide script, request %d of %d: %w", i+1, len(batch), scriptError(err))
				reply = reply[1:]
				continue
			}
		}
		n := replyWidth(p)
		if len(reply) < n+1 {
			return fmt.Errorf("decide script: reply ends at request %d of %d", i+1, len(batch))
		}
		v, err := int64s(reply[:n+1])
		if err != nil {
			return fmt.Errorf("decide script, request %d of %d: %w", i+1, len(batch), err)
		}
		p.ds = decisions(p.reqs, v[:n], v[n])
		reply = reply[n+1:]
	}
	if len(reply) != 0 {
		return fmt.Errorf("decide script: %d values past the last request", len(reply))
	}
	return nil
}

// int64s checks that every value of a reply is an integer.
func int64s(vs []any) ([]int64, error) {
	out := make([]int64, len(vs))
	for i, v := range vs {
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("value %d: got %T, want an integer", i+1, v)
		}
		out[i] = n
	}
	return out, nil
}

// replyWidth is how many values p's zones take in the reply (a settlement
// returns none: only its time follows).
func replyWidth(p *pending) int {
	if p.mode == modeSettle {
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
	}
	return n
}

// banReplyWidth is how many more values a zone with a ban returns: 0 not
// banned, 1 banned, 2 banned by this call.
const banReplyWidth = 1

// BanKey is the Redis key of the ban of the state at key: beside it, in
// the same hash tag (so the same Cluster slot). It holds the ban's end in
// µs of Redis's clock and expires then.
func BanKey(key string) string { return key + ":b" }

// overrideReplyWidth is how many more values a zone with overrides
// returns: the events and burst by override (0 and 0 when none is).
const overrideReplyWidth = 2

// overrideAlgorithms are the algorithm arguments of zones with overrides:
// the name with ":o", built once.
var overrideAlgorithms = func() map[algorithms.Algorithm]string {
	m := make(map[algorithms.Algorithm]string)
	for _, a := range []algorithms.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindow,
		algorithms.SlidingLog, algorithms.TokenBucket, algorithms.Concurrency} {
		m[a] = string(a) + ":o"
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
// it, in the same hash tag (so the same Cluster slot).
func OverrideKey(key string) string { return key + ":o" }

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
		ds[i] = algorithms.Decision{
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

// leaseArg is the decide script's lease argument: the lease, or for a
// calendar zone its period boundaries (the window is then 0). A zone with
// a window sends its lease ("" but on concurrency), as it always has.
func leaseArg(l algorithms.Limit, lease string) string {
	if !l.HasPeriod() {
		return lease
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
// unset, for other algorithms, and for a dry-run zone.
func maxDelayArg(r algorithms.Request) int64 {
	if r.Limit.Algorithm != algorithms.TokenBucket || r.DryRun {
		return 0
	}
	return r.Limit.MaxDelay.Microseconds()
}

// The dispatcher's modes.
const (
	modeConsume = "1"
	modePeek    = "0"
	modeSettle  = "settle"
)

// firstKey is the first key p reaches (its slot on Cluster).
func (p *pending) firstKey() string {
	if len(p.reqs) > 0 {
		return p.reqs[0].Key
	}
	return p.ss[0].Key
}
