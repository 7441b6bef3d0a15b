package algorithms

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// zoneReplyWidth is how many values the decide code returns per zone:
// allowed, remaining, retry after, reset. Each request's zones are followed
// by its now.
const zoneReplyWidth = 4

// zoneArgs is how many arguments each zone passes: algorithm, events,
// window, burst, cost, dry run (ZONE_ARGS in decide.lua).
const zoneArgs = 6

// sendBatch decides batch in one round trip: one call for all of it on a
// standalone or Sentinel Redis; on Cluster one call per slot, pipelined
// (each request's keys share a slot: RedisStore.run splits the others).
// Order holds within a call, and requests in different slots share no key.
func (s *RedisStore) sendBatch(ctx context.Context, batch []*pending) {
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

// bySlot groups batch by its requests' Cluster slot, in order.
func bySlot(batch []*pending) [][]*pending {
	index := make(map[uint16]int, len(batch))
	var groups [][]*pending
	for _, p := range batch {
		slot := keySlot(p.reqs[0].Key)
		i, ok := index[slot]
		if !ok {
			i = len(groups)
			index[slot] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], p)
	}
	return groups
}

// encode builds the call deciding batch in order: the request count, then
// per request its mode, now and zone count and its zones' arguments.
func encode(batch []*pending) *call {
	zones := 0
	for _, p := range batch {
		zones += len(p.reqs)
	}
	c := &call{keys: make([]string, 0, zones), args: make([]any, 0, 1+3*len(batch)+zoneArgs*zones)}
	c.args = append(c.args, len(batch))
	for _, p := range batch {
		c.args = append(c.args, p.mode, p.now, len(p.reqs))
		for _, r := range p.reqs {
			c.keys = append(c.keys, r.Key)
			c.args = append(c.args, string(r.Limit.Algorithm), r.Limit.Events,
				r.Limit.Window.Microseconds(), r.Limit.Capacity(), r.Cost, dryRunArg(r.DryRun))
		}
	}
	return c
}

// decode hands each request of batch its slice of c's reply.
func decode(batch []*pending, c *call) error {
	if c.err != nil {
		return fmt.Errorf("running decide script: %w", c.err)
	}
	want := 0
	for _, p := range batch {
		want += replyWidth(p) + 1
	}
	if len(c.reply) != want {
		return fmt.Errorf("decide script: got %d values, want %d", len(c.reply), want)
	}
	reply := c.reply
	for _, p := range batch {
		n := replyWidth(p)
		p.ds = decisions(reply[:n])
		p.stamp = strconv.FormatInt(reply[n], 10)
		reply = reply[n+1:]
	}
	return nil
}

// replyWidth is how many values p's zones take in the reply (a refund
// returns none).
func replyWidth(p *pending) int {
	if p.mode == modeRefund {
		return 0
	}
	return zoneReplyWidth * len(p.reqs)
}

// decisions reads one request's zones from v.
func decisions(v []int64) []Decision {
	if len(v) == 0 {
		return nil
	}
	ds := make([]Decision, len(v)/zoneReplyWidth)
	for i := range ds {
		z := v[zoneReplyWidth*i:]
		ds[i] = Decision{
			Allowed:    z[0] == 1,
			Remaining:  z[1],
			RetryAfter: time.Duration(z[2]) * time.Microsecond,
			ResetAfter: time.Duration(z[3]) * time.Microsecond,
		}
	}
	return ds
}

// The dispatcher's modes.
const (
	modeConsume = "1"
	modePeek    = "0"
	modeRefund  = "refund"
)
