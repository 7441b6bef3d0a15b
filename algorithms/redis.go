package algorithms

import (
	"context"
	"fmt"
	"strconv"
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
	client redis.UniversalClient
}

// NewRedisStore returns a store on client. The caller owns the client.
func NewRedisStore(client redis.UniversalClient) *RedisStore {
	return &RedisStore{client: client}
}

// Allow decides reqs at Redis's time: all are admitted and consume, or none.
func (s *RedisStore) Allow(ctx context.Context, reqs []Request) ([]Decision, error) {
	return s.run(ctx, "", reqs)
}

// AllowAt decides reqs as if Redis TIME read now; for tests and replays.
func (s *RedisStore) AllowAt(ctx context.Context, now time.Time, reqs []Request) ([]Decision, error) {
	return s.run(ctx, strconv.FormatInt(now.UnixMicro(), 10), reqs)
}

func (s *RedisStore) run(ctx context.Context, now string, reqs []Request) ([]Decision, error) {
	keys := make([]string, len(reqs))
	args := make([]any, 0, 2+6*len(reqs))
	args = append(args, now, "1")
	for i, r := range reqs {
		keys[i] = r.Key
		args = append(args, string(r.Limit.Algorithm), r.Limit.Events,
			r.Limit.Window.Microseconds(), r.Limit.Capacity(), r.Cost, dryRunArg(r.DryRun))
	}
	reply, err := decideScript.Run(ctx, s.client, keys, args...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("running decide script: %w", err)
	}
	if len(reply) != 4*len(reqs) {
		return nil, fmt.Errorf("decide script: got %d values, want %d", len(reply), 4*len(reqs))
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
	return ds, nil
}

func dryRunArg(dryRun bool) string {
	if dryRun {
		return "1"
	}
	return "0"
}
