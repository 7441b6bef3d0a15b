package algorithms

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/luascripts"
)

// decideScript runs by EVALSHA and falls back to EVAL on NOSCRIPT, so a
// restarted Redis (empty script cache) recovers by itself.
var decideScript = redis.NewScript(luascripts.Decide)

// RedisStore decides with one atomic Lua script per request, timed by Redis
// TIME so that every Caddy node shares one clock.
type RedisStore struct {
	client        redis.UniversalClient
	refundTimeout time.Duration
}

// DefaultRefundTimeout bounds a Cluster refund unless WithRefundTimeout
// says otherwise: the default decision timeout of the Caddy module.
const DefaultRefundTimeout = 100 * time.Millisecond

// NewRedisStore returns a store on client. The caller owns the client.
func NewRedisStore(client redis.UniversalClient) *RedisStore {
	return &RedisStore{client: client, refundTimeout: DefaultRefundTimeout}
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
	return decideScript.Load(ctx, s.client).Err()
}

// Peek decides reqs as Allow would, at Redis's time, consuming nothing.
func (s *RedisStore) Peek(ctx context.Context, reqs []Request) ([]Decision, error) {
	ds := make([]Decision, len(reqs))
	for i := range reqs { // one call per key: on Cluster keys differ in slot
		d, _, err := s.call(ctx, "", "0", reqs[i:i+1])
		if err != nil {
			return nil, err
		}
		ds[i] = d[0]
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
	if _, cluster := s.client.(*redis.ClusterClient); cluster && len(reqs) > 1 {
		return s.runPerSlot(ctx, now, reqs)
	}
	ds, _, err := s.call(ctx, now, "1", reqs)
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
	stamps := make([]string, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() {
			var d []Decision
			d, stamps[i], errs[i] = s.call(ctx, now, "1", reqs[i:i+1])
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
	s.refund(ctx, reqs, ds, stamps, errs)
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
func (s *RedisStore) refund(ctx context.Context, reqs []Request, ds []Decision, stamps []string, errs []error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.refundTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, r := range reqs {
		if errs[i] != nil || !ds[i].Allowed {
			continue
		}
		ds[i].Remaining += r.Cost
		wg.Go(func() { _, _, _ = s.call(ctx, stamps[i], "refund", reqs[i:i+1]) })
	}
	wg.Wait()
}

// call runs the decide script in mode over reqs, whose keys share a slot,
// and returns the decisions and the time they were taken at.
func (s *RedisStore) call(ctx context.Context, now, mode string, reqs []Request) ([]Decision, string, error) {
	keys := make([]string, len(reqs))
	args := make([]any, 0, 2+6*len(reqs))
	args = append(args, now, mode)
	for i, r := range reqs {
		keys[i] = r.Key
		args = append(args, string(r.Limit.Algorithm), r.Limit.Events,
			r.Limit.Window.Microseconds(), r.Limit.Capacity(), r.Cost, dryRunArg(r.DryRun))
	}
	reply, err := s.eval(ctx, keys, args).Int64Slice()
	if err != nil {
		return nil, "", fmt.Errorf("running decide script: %w", err)
	}
	if mode == "refund" {
		return nil, "", nil
	}
	if len(reply) != 4*len(reqs)+1 {
		return nil, "", fmt.Errorf("decide script: got %d values, want %d", len(reply), 4*len(reqs)+1)
	}
	ds := make([]Decision, len(reqs))
	for i := range ds {
		v := reply[4*i : 4*i+4]
		ds[i] = Decision{
			Allowed:    v[0] == 1,
			Remaining:  v[1],
			RetryAfter: time.Duration(v[2]) * time.Microsecond,
			ResetAfter: time.Duration(v[3]) * time.Microsecond,
		}
	}
	return ds, strconv.FormatInt(reply[len(reply)-1], 10), nil
}

// eval runs the decide script by EVALSHA, and by EVAL when Redis answers
// NOSCRIPT (it ran nothing). Neither is replayed after a failure that may
// have reached Redis: the script consumes or refunds, and a second run
// would do it twice (go-redis retries a command after a connection error
// by default; noRetryCmd tells it not to, but still to retry a command
// that never reached the wire). Cluster redirections (MOVED, ASK) are
// followed: Redis ran nothing then either.
func (s *RedisStore) eval(ctx context.Context, keys []string, args []any) *redis.Cmd {
	cmd := scriptCmd(ctx, "evalsha", decideScript.Hash(), keys, args)
	_ = s.client.Process(ctx, cmd)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = scriptCmd(ctx, "eval", luascripts.Decide, keys, args)
		_ = s.client.Process(ctx, cmd)
	}
	return cmd.Cmd
}

func scriptCmd(ctx context.Context, name, script string, keys []string, args []any) noRetryCmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, name, script, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmdArgs = append(cmdArgs, args...)
	cmd := redis.NewCmd(ctx, cmdArgs...)
	cmd.SetFirstKeyPos(3) // for Cluster's slot routing, as go-redis's own Eval does
	return noRetryCmd{cmd}
}

// noRetryCmd is a command go-redis must not send twice: after an error it
// retries it only if it never reached the wire.
type noRetryCmd struct{ *redis.Cmd }

func (noRetryCmd) NoRetry() bool { return true }

func (c noRetryCmd) Clone() redis.Cmder {
	if clone, ok := c.Cmd.Clone().(*redis.Cmd); ok {
		return noRetryCmd{clone}
	}
	return c.Cmd.Clone()
}

func dryRunArg(dryRun bool) string {
	if dryRun {
		return "1"
	}
	return "0"
}
