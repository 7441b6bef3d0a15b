package redisstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// runPerSlot decides on Redis Cluster, where each zone's key lives in its
// own slot and one script cannot reach them all: each zone decides and
// consumes alone, in parallel, and when the request is denied the zones
// that consumed are refunded. Between a zone's consumption and its refund a
// concurrent request sees that quota taken; it may be denied, but never is
// more admitted than the limit.
//
// A zone that denied is a definitive answer even when another zone's slot
// failed: the request is denied, with no error (so that failure_mode does
// not admit it); the failed zones report a zero Decision (not allowed, no
// quota, no retry time).
func (s *Store) runPerSlot(ctx context.Context, now string, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	reqs = withoutQuotaAsks(reqs)
	ds := make([]algorithms.Decision, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() {
			var d []algorithms.Decision
			d, errs[i] = s.call(ctx, now, modeConsume, reqs[i:i+1])
			if errs[i] == nil {
				ds[i] = d[0]
			}
		})
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err == nil && algorithms.Admitted(reqs, ds) {
		return ds, nil
	}
	s.refund(ctx, now, reqs, ds, errs)
	if denied(reqs, ds, errs) {
		return ds, nil
	}
	return ds, err
}

// denied reports whether a zone that answered denies the request.
func denied(reqs []algorithms.Request, ds []algorithms.Decision, errs []error) bool {
	for i, d := range ds {
		if errs[i] == nil && !d.Allowed && !reqs[i].DryRun {
			return true
		}
	}
	return false
}

// refund gives back, in parallel, what the zones that admitted consumed.
// Refunds outlive the request's context (a client that leaves must not
// keep the quota spent) but not the refund timeout. Best effort: a failed
// refund only leaves the quota spent.
func (s *Store) refund(ctx context.Context, now string, reqs []algorithms.Request, ds []algorithms.Decision, errs []error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.refundTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, r := range reqs {
		if errs[i] != nil || !ds[i].Allowed {
			continue
		}
		ds[i].Remaining += r.Cost
		wg.Go(func() { _ = s.settleCall(ctx, now, []algorithms.Settlement{refundOf(r, ds[i])}) })
	}
	wg.Wait()
}

// bySlot groups batch by its requests' Cluster slot, in order.
func bySlot(batch []*pending) [][]*pending {
	index := make(map[uint16]int, len(batch))
	var groups [][]*pending
	for _, p := range batch {
		slot := keySlot(p.firstKey())
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

// keySlot is Redis Cluster's hash slot of key: CRC16 (XMODEM) of the key,
// or of its hash tag (the part between the first "{" and the next "}",
// when not empty), modulo 16384.
func keySlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) % 16384
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), as Redis
// Cluster computes it.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// withoutQuotaAsks is reqs asking for no quota lease: calls of one slot
// each cannot grant every zone its lease or none (all or nothing), so
// such a request leases nothing; its zones still report their units out.
func withoutQuotaAsks(reqs []algorithms.Request) []algorithms.Request {
	if !slices.ContainsFunc(reqs, func(r algorithms.Request) bool { return r.Quota.Units > 0 }) {
		return reqs
	}
	reqs = slices.Clone(reqs)
	for i := range reqs {
		reqs[i].Quota.Units = 0
	}
	return reqs
}
