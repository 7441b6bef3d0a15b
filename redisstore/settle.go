package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// Settle applies ss at Redis's time: in calls of at most maxBatchKeys
// settlements, one after another (a call blocks Redis while it runs: the
// give-backs of 20,000 leases ending at once took 0.4 s in one, and
// decisions queued behind it), or on Redis Cluster, where each key has its
// own slot, one call per key, in parallel. A call is never replayed (it
// may have run): a failed settlement is lost, and a lost concurrency slot
// expires after its window.
func (s *Store) Settle(ctx context.Context, ss []algorithms.Settlement) error {
	return s.settle(ctx, "", ss)
}

// SettleAt applies ss as if Redis TIME read now; for tests and replays.
func (s *Store) SettleAt(ctx context.Context, now time.Time, ss []algorithms.Settlement) error {
	return s.settle(ctx, strconv.FormatInt(now.UnixMicro(), 10), ss)
}

func (s *Store) settle(ctx context.Context, now string, ss []algorithms.Settlement) error {
	ss = effective(ss)
	if len(ss) == 0 {
		return nil
	}
	if _, cluster := s.client.(*redis.ClusterClient); !cluster || len(ss) == 1 {
		var errs []error
		for chunk := range slices.Chunk(ss, maxBatchKeys) {
			errs = append(errs, s.settleCall(ctx, now, chunk))
		}
		return errors.Join(errs...)
	}
	errs := make([]error, len(ss))
	var wg sync.WaitGroup
	for i := range ss {
		wg.Go(func() { errs[i] = s.settleCall(ctx, now, ss[i:i+1]) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// settleCall settles ss, whose keys share a slot, through the batcher: in
// the same calls as decisions.
func (s *Store) settleCall(ctx context.Context, now string, ss []algorithms.Settlement) error {
	p := &pending{now: now, mode: modeSettle, ss: ss}
	if err := s.batcher.do(ctx, p); err != nil {
		return fmt.Errorf("settling: %w", err)
	}
	if report := s.giveBacks; report != nil && len(p.taken) == len(ss) {
		for i, st := range ss {
			if st.QuotaFor > 0 {
				report(st.Key, -st.Delta, p.taken[i])
			}
		}
	}
	return nil
}

// ReportGiveBacks has report called with each give-back Redis answered:
// its key, its units and whether Redis took them (algorithms.GiveBackReporter).
// Call it before the store is used.
func (s *Store) ReportGiveBacks(report func(key string, units int64, taken bool)) {
	s.giveBacks = report
}

// effective drops the settlements that change nothing.
func effective(ss []algorithms.Settlement) []algorithms.Settlement {
	out := ss[:0:0]
	for _, st := range ss {
		if st.Delta != 0 || st.Slot != "" {
			out = append(out, st)
		}
	}
	return out
}

// refundOf is the settlement that gives back all r took, decided as d.
func refundOf(r algorithms.Request, d algorithms.Decision) algorithms.Settlement {
	return algorithms.Settlement{Key: r.Key, Limit: d.Override.Apply(r.Limit), At: d.At, Delta: -r.Cost, Slot: r.Slot}
}
