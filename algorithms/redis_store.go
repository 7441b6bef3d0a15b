package algorithms

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisStore decides each request atomically in Redis (a Redis Function,
// or a Lua script where Functions are missing), timed by Redis TIME so that
// every Caddy node shares one clock. Concurrent requests share calls: one
// call decides a batch of them in order (see batcher).
type RedisStore struct {
	client        redis.UniversalClient
	runner        *runner
	batcher       *batcher
	refundTimeout time.Duration
}

// DefaultRefundTimeout bounds a Cluster refund unless WithRefundTimeout
// says otherwise: the default decision timeout of the Caddy module.
const DefaultRefundTimeout = 100 * time.Millisecond

// NewRedisStore returns a store on client with the default options. The
// caller owns the client.
func NewRedisStore(client redis.UniversalClient) *RedisStore {
	return NewRedisStoreWith(client, RedisOptions{})
}

// WithRefundTimeout sets how long a Cluster refund may take (default
// DefaultRefundTimeout); it runs apart from the request's context, which
// may end first, and returns s.
func (s *RedisStore) WithRefundTimeout(d time.Duration) *RedisStore {
	if d > 0 {
		s.refundTimeout = d
	}
	return s
}

// Allow decides reqs at Redis's time: all are admitted and consume, or none.
func (s *RedisStore) Allow(ctx context.Context, reqs []Request) ([]Decision, error) {
	return s.run(ctx, "", reqs)
}

// Warm connects and loads the script ahead of the first request, so that
// it does not pay for the dial, the TLS handshake and the script load.
func (s *RedisStore) Warm(ctx context.Context) error {
	return s.runner.warm(ctx)
}

// Peek decides reqs as Allow would, at Redis's time, consuming nothing.
func (s *RedisStore) Peek(ctx context.Context, reqs []Request) ([]Decision, error) {
	if ds, over, err := overCapacity(reqs, func(fit []Request) ([]Decision, error) {
		return s.Peek(ctx, fit)
	}); over {
		return ds, err
	}
	ds := make([]Decision, len(reqs))
	for i := range reqs { // one call per key: on Cluster keys differ in slot
		// a call of its own, not through the batcher: an operator's look
		// has a longer deadline, which must not hold requests past theirs
		p := &pending{mode: modePeek, reqs: reqs[i : i+1]}
		s.sendBatch(ctx, []*pending{p})
		if p.err != nil {
			return nil, p.err
		}
		ds[i] = p.ds[0]
	}
	return ds, nil
}

// Reset deletes key's state.
func (s *RedisStore) Reset(ctx context.Context, key string) error {
	return s.client.Del(ctx, key).Err()
}

// AllowAt decides reqs as if Redis TIME read now; for tests and replays.
func (s *RedisStore) AllowAt(ctx context.Context, now time.Time, reqs []Request) ([]Decision, error) {
	return s.run(ctx, strconv.FormatInt(now.UnixMicro(), 10), reqs)
}

func (s *RedisStore) run(ctx context.Context, now string, reqs []Request) ([]Decision, error) {
	if ds, over, err := overCapacity(reqs, func(fit []Request) ([]Decision, error) {
		return s.run(ctx, now, fit)
	}); over { // a cost no state admits never reaches Redis
		return ds, err
	}
	if _, cluster := s.client.(*redis.ClusterClient); cluster && len(reqs) > 1 {
		return s.runPerSlot(ctx, now, reqs)
	}
	ds, err := s.call(ctx, now, modeConsume, reqs)
	return ds, err
}

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
func (s *RedisStore) runPerSlot(ctx context.Context, now string, reqs []Request) ([]Decision, error) {
	ds := make([]Decision, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() {
			var d []Decision
			d, errs[i] = s.call(ctx, now, modeConsume, reqs[i:i+1])
			if errs[i] == nil {
				ds[i] = d[0]
			}
		})
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err == nil && Admitted(reqs, ds) {
		return ds, nil
	}
	s.refund(ctx, now, reqs, ds, errs)
	if denied(reqs, ds, errs) {
		return ds, nil
	}
	return ds, err
}

// denied reports whether a zone that answered denies the request.
func denied(reqs []Request, ds []Decision, errs []error) bool {
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
func (s *RedisStore) refund(ctx context.Context, now string, reqs []Request, ds []Decision, errs []error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.refundTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, r := range reqs {
		if errs[i] != nil || !ds[i].Allowed {
			continue
		}
		ds[i].Remaining += r.Cost
		wg.Go(func() { _ = s.settleCall(ctx, now, []Settlement{refundOf(r, ds[i])}) })
	}
	wg.Wait()
}

// call decides reqs, whose keys share a slot, in mode, through the
// batcher; each decision carries the time it was taken at.
func (s *RedisStore) call(ctx context.Context, now, mode string, reqs []Request) ([]Decision, error) {
	p := &pending{now: now, mode: mode, reqs: reqs}
	if err := s.batcher.do(ctx, p); err != nil {
		return nil, err
	}
	return p.ds, nil
}

func dryRunArg(dryRun bool) string {
	if dryRun {
		return "1"
	}
	return "0"
}
