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

// Settle applies ss at Redis's time, in calls (inCalls). A call is never
// replayed (it may have run): a failed settlement is lost, and a lost
// concurrency slot expires after its window.
func (s *Store) Settle(ctx context.Context, ss []algorithms.Settlement) error {
	return s.settle(ctx, "", ss)
}

// SettleAt applies ss as if Redis TIME read now; for tests and replays.
func (s *Store) SettleAt(ctx context.Context, now time.Time, ss []algorithms.Settlement) error {
	return s.settle(ctx, strconv.FormatInt(now.UnixMicro(), 10), ss)
}

func (s *Store) settle(ctx context.Context, now string, ss []algorithms.Settlement) error {
	ss = slices.DeleteFunc(slices.Clone(ss), func(st algorithms.Settlement) bool { return st.Delta == 0 && st.Slot == "" }) // they change nothing
	return inCalls(ctx, s, now, ss, (*Store).settleCall)
}

// GiveBack applies gbs at Redis's time (algorithms.QuotaLender), in calls
// (inCalls), never replayed: a failed give-back's units stay taken.
func (s *Store) GiveBack(ctx context.Context, gbs []algorithms.GiveBack) error {
	return s.giveBack(ctx, "", gbs)
}

// GiveBackAt applies gbs as if Redis TIME read now; for tests and replays.
func (s *Store) GiveBackAt(ctx context.Context, now time.Time, gbs []algorithms.GiveBack) error {
	return s.giveBack(ctx, strconv.FormatInt(now.UnixMicro(), 10), gbs)
}

func (s *Store) giveBack(ctx context.Context, now string, gbs []algorithms.GiveBack) error {
	gbs = slices.DeleteFunc(slices.Clone(gbs), func(g algorithms.GiveBack) bool { return g.Units == 0 }) // they change nothing
	return inCalls(ctx, s, now, gbs, (*Store).giveBackCall)
}

// inCalls sends items (settlements or give-backs) to s by call: at most
// maxBatchKeys a call, one call after another (a call blocks Redis while
// it runs: the give-backs of 20,000 leases ending at once took 0.4 s in
// one, and decisions queued behind it), or on Redis Cluster, where each
// key has its own slot, one call per key, in parallel.
func inCalls[T any](ctx context.Context, s *Store, now string, items []T, call func(*Store, context.Context, string, []T) error) error {
	if len(items) == 0 {
		return nil
	}
	if _, cluster := s.client.(*redis.ClusterClient); !cluster || len(items) == 1 {
		var errs []error
		for chunk := range slices.Chunk(items, maxBatchKeys) {
			errs = append(errs, call(s, ctx, now, chunk))
		}
		return errors.Join(errs...)
	}
	errs := make([]error, len(items))
	var wg sync.WaitGroup
	for i := range items {
		wg.Go(func() { errs[i] = call(s, ctx, now, items[i:i+1]) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// settleCall settles ss, whose keys share a slot, through the batcher: in
// the same calls as decisions.
func (s *Store) settleCall(ctx context.Context, now string, ss []algorithms.Settlement) error {
	if err := s.batcher.do(ctx, &pending{now: now, mode: modeSettle, ss: ss}); err != nil {
		return fmt.Errorf("settling: %w", err)
	}
	return nil
}

// giveBackCall gives back gbs, whose keys share a slot, through the
// batcher, and reports what Redis answered of each (ReportGiveBacks).
func (s *Store) giveBackCall(ctx context.Context, now string, gbs []algorithms.GiveBack) error {
	p := &pending{now: now, mode: modeSettle, gbs: gbs}
	if err := s.batcher.do(ctx, p); err != nil {
		return fmt.Errorf("giving back: %w", err)
	}
	if report := s.giveBacks; report != nil && len(p.taken) == len(gbs) {
		for i, g := range gbs {
			if g.LeaseFor > 0 {
				report(g.Key, g.Units, p.taken[i])
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

// refundOf is the settlement that gives back all r took, decided as d.
func refundOf(r algorithms.Request, d algorithms.Decision) algorithms.Settlement {
	return algorithms.Settlement{Key: r.Key, Limit: d.Override.Apply(r.Limit), At: d.At, Delta: -r.Cost, Slot: r.Slot}
}
