package redisstore

import (
	"context"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// Quota leases on Redis (luascripts/quota_lease.lua): a request with a
// zone that leases is sent with the mode's 'q' ("1q", "0q", "settleq")
// and one more field per zone after the zones' own: "0" for a zone that
// does not lease, else its quota_lease (µs) and, in a decision, the
// units asked, the shortest lease worth having (µs) and the holder's
// name; in a give-back, the grant's generation, id and end (µs). A zone
// that leases replies with quotaReplyWidth more values.

// quotaReplyWidth is how many more values a zone that leases returns:
// units granted, the grant's end, the key's generation, the grant's id,
// the units out, the takers (algorithms.QuotaGrant).
const quotaReplyWidth = 6

// QuotaKey is the Redis key of the quota lease bookkeeping of the state
// at key: beside it, in the same hash tag (so the same Cluster slot),
// named after the key without its state format, as its ban and override
// are.
func QuotaKey(key string) string { return algorithms.StateBase(key) + ":q" }

// leasing reports whether p has a zone that leases, or is a give-back.
func (p *pending) leasing() bool {
	for i := range p.reqs {
		if p.reqs[i].ReadsLeases() {
			return true
		}
	}
	for i := range p.gbs {
		if p.gbs[i].LeaseFor > 0 {
			return true
		}
	}
	return false
}

// appendQuotaFields appends p's quota lease fields, one per zone (a
// settlement has none: those of give-backs are sent on their own).
func appendQuotaFields(b []byte, p *pending) []byte {
	for _, r := range p.reqs {
		q := r.Quota
		if !r.ReadsLeases() {
			b = append(b, " 0"...)
			continue
		}
		b = strconv.AppendInt(append(b, ' '), q.For.Microseconds(), 10)
		b = strconv.AppendInt(append(b, ','), max(0, q.Units), 10)
		b = strconv.AppendInt(append(b, ','), q.Min.Microseconds(), 10)
		b = append(append(b, ','), holderName(q.Holder)...)
	}
	for _, g := range p.gbs {
		if g.LeaseFor <= 0 {
			b = append(b, " 0"...)
			continue
		}
		b = strconv.AppendInt(append(b, ' '), g.LeaseFor.Microseconds(), 10)
		b = strconv.AppendInt(append(b, ','), g.Grant.Generation, 10)
		b = strconv.AppendInt(append(b, ','), g.Grant.ID, 10)
		b = strconv.AppendInt(append(b, ','), g.Grant.End, 10)
		b = append(append(b, ','), holderName(g.Holder)...)
	}
	return b
}

// quotaKeep is how long a key's bookkeeping outlives a new generation:
// past the end + quota_lease of any lease granted before it (at most
// twice MaxQuotaLease away), so no give-back of an earlier generation
// lands on a hash that expired and started over.
const quotaKeep = 2*algorithms.MaxQuotaLease + algorithms.QuotaGiveBackGrace + time.Second

// newGeneration raises the generation of key's quota leases, in p (a
// reset's or an override's transaction): give-backs of the leases out
// do nothing from then on. A reset (ended) also ends the units out: the
// state that counted them is gone.
func newGeneration(ctx context.Context, p redis.Pipeliner, key string, ended bool) {
	qk := QuotaKey(key)
	// a new hash starts at this clock's µs, as the scripts start one at
	// Redis TIME: above the generations of a hash Redis lost
	p.HSetNX(ctx, qk, "g", time.Now().UnixMicro())
	p.HIncrBy(ctx, qk, "g", 1)
	if ended {
		p.HSet(ctx, qk, "u", 0, "e", 0)
	}
	p.PExpire(ctx, qk, quotaKeep)
}

// holderName is a holder's name as a field of a request's string: one
// word of letters, digits, '-' and '_' ("-" for none).
func holderName(h string) string {
	if h == "" || strings.ContainsFunc(h, func(r rune) bool {
		return !(r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)) || r > unicode.MaxASCII
	}) {
		return "-"
	}
	return h
}
