// Package redisstore is the Redis store of Sluice's algorithms: each
// request is decided by one atomic call of the decide code (a Redis
// Function, or a Lua script where Functions are missing), timed by Redis
// TIME. Concurrent requests share calls (batcher.go); on Redis Cluster a
// request's zones are decided per slot and refunded when one denies
// (cluster.go). The algorithms' meaning, and their Go twins, live in
// package algorithms.
package redisstore

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// Store decides each request atomically in Redis (a Redis Function, or a
// Lua script where Functions are missing), timed by Redis TIME so that
// every Caddy node shares one clock. Concurrent requests share calls: one
// call decides a batch of them in order (see batcher). A Store is safe for
// concurrent use.
type Store struct {
	client        redis.UniversalClient
	runner        *runner
	batcher       *batcher
	refundTimeout time.Duration
	giveBacks     func(key string, units int64, taken bool) // ReportGiveBacks
}

// DefaultRefundTimeout bounds a Cluster refund unless Options.RefundTimeout
// says otherwise: the default decision timeout of the Caddy module.
const DefaultRefundTimeout = 100 * time.Millisecond

// Options tune a Store; the zero value is the default.
type Options struct {
	// InFlight is how many calls the store keeps in flight at once;
	// requests beyond wait and share the next call. 0 means
	// DefaultInFlight; a negative value sends every request in a call of
	// its own (no batching).
	InFlight int
	// Scripts makes the store use EVALSHA even where Redis has Functions.
	Scripts bool
	// RefundTimeout is how long a Cluster refund may take; it runs apart
	// from the request's context, which may end first. 0 means
	// DefaultRefundTimeout.
	RefundTimeout time.Duration
}

// New returns a store on client with opts. The caller owns the client.
func New(client redis.UniversalClient, opts Options) *Store {
	s := &Store{client: client, runner: &runner{client: client}, refundTimeout: DefaultRefundTimeout}
	if opts.RefundTimeout > 0 {
		s.refundTimeout = opts.RefundTimeout
	}
	s.runner.scripts.Store(opts.Scripts)
	inFlight := opts.InFlight
	switch {
	case inFlight == 0:
		inFlight = DefaultInFlight
	case inFlight < 0:
		inFlight = math.MaxInt
	}
	s.batcher = &batcher{send: s.sendBatch, inFlight: inFlight}
	return s
}

// Allow decides reqs at Redis's time: all are admitted and consume, or none.
func (s *Store) Allow(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	return s.run(ctx, "", reqs)
}

// Warm connects and loads the script ahead of the first request, so that
// it does not pay for the dial, the TLS handshake and the script load.
func (s *Store) Warm(ctx context.Context) error {
	return s.runner.warm(ctx)
}

// Peek decides reqs as Allow would, at Redis's time, consuming nothing.
func (s *Store) Peek(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	if ds, over, err := algorithms.OverCapacityAt(time.Now().UnixMicro(), reqs, func(fit []algorithms.Request) ([]algorithms.Decision, error) {
		return s.Peek(ctx, fit)
	}); over {
		return ds, err
	}
	ds := make([]algorithms.Decision, len(reqs))
	for i := range reqs { // one call per key: on Cluster keys differ in slot
		// a call of its own, not through the batcher: an operator's look
		// has a longer deadline, which must not hold requests past theirs
		p := &pending{mode: modePeek, reqs: reqs[i : i+1]}
		s.sendBatch(ctx, []*pending{p}, nil)
		if p.err != nil {
			return nil, p.err
		}
		ds[i] = p.ds[0]
	}
	return ds, nil
}

// Reset deletes key's state and lifts its ban (under either name), then
// tells every instance on this Redis (PUBLISH on ResetChannel) so that
// they drop their cached denials of key (SubscribeResets). Its override
// stays. A reset done but not announced is an *algorithms.UnannouncedError.
func (s *Store) Reset(ctx context.Context, key string) error {
	if _, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, key, BanKey(key), formatBanKey(key))
		newGeneration(ctx, p, key, true)
		return nil
	}); err != nil {
		return err
	}
	return s.announce(ctx, key, "reset")
}

// announce tells every instance on this Redis that key's state changed
// (PUBLISH on ResetChannel): they drop their cached denials and quota
// leases of key (SubscribeResets). what names the change in the error, an
// *algorithms.UnannouncedError.
func (s *Store) announce(ctx context.Context, key, what string) error {
	if err := s.client.Publish(ctx, ResetChannel, key).Err(); err != nil {
		return &algorithms.UnannouncedError{Err: fmt.Errorf("%s, but not announced to the other instances (they keep their cached denials and quota leases of the key until these end): PUBLISH %s: %w", what, ResetChannel, channelHint(err))}
	}
	return nil
}

// SetOverride sets key's override: the hash OverrideKey(key) holds its
// events (e) and capacity (b), and with a ttl its end on Redis's clock
// (x, µs), which the decide code compares with its now; the key expires
// then too. TTL 0 keeps it until ClearOverride. The expanded key ctx
// carries (algorithms.WithOverrideKey) is kept beside them (k), and the
// key's hash is added to its zone's index (overrides.go).
func (s *Store) SetOverride(ctx context.Context, key string, o algorithms.Override, ttl time.Duration) error {
	var now time.Time
	if ttl > 0 {
		t, err := s.client.Time(ctx).Result()
		if err != nil {
			return err
		}
		now = t
	}
	return s.SetOverrideAt(ctx, now, key, o, ttl)
}

// SetOverrideAt is SetOverride with Redis's clock reading now; for tests.
func (s *Store) SetOverrideAt(ctx context.Context, now time.Time, key string, o algorithms.Override, ttl time.Duration) error {
	capacity := o.Burst
	if capacity <= 0 {
		capacity = o.Events
	}
	ok := OverrideKey(key)
	fields := []any{"e", o.Events, "b", capacity}
	if expanded := algorithms.OverrideKeyFrom(ctx); expanded != "" { // log_key's: for ListOverrides
		fields = append(fields, "k", expanded)
	}
	if _, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		if err := s.indexOverride(ctx, p, key); err != nil { // the zone's index (overrides.go)
			return err
		}
		p.Del(ctx, ok, formatOverrideKey(key)) // an earlier release's name would outlive a ttl
		if ttl > 0 {
			end := now.Add(ttl)
			p.HSet(ctx, ok, append(fields, "x", end.UnixMicro())...)
			p.PExpire(ctx, ok, ttl+time.Second) // x decides; the key goes a little later
		} else {
			p.HSet(ctx, ok, fields...)
		}
		newGeneration(ctx, p, key, false)
		return nil
	}); err != nil {
		return err
	}
	return s.announce(ctx, key, "override set")
}

// ClearOverride deletes key's override, under either name, and its entry
// in its zone's index (overrides.go).
func (s *Store) ClearOverride(ctx context.Context, key string) error {
	if _, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, OverrideKey(key), formatOverrideKey(key))
		s.unindexOverride(ctx, p, key) // the zone's index (overrides.go)
		newGeneration(ctx, p, key, false)
		return nil
	}); err != nil {
		return err
	}
	s.unindexCleared(ctx, key) // on Cluster, after
	return s.announce(ctx, key, "override cleared")
}

// AllowAt decides reqs as if Redis TIME read now; for tests and replays.
func (s *Store) AllowAt(ctx context.Context, now time.Time, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	return s.run(ctx, strconv.FormatInt(now.UnixMicro(), 10), reqs)
}

func (s *Store) run(ctx context.Context, now string, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	if !algorithms.CostsFit(reqs) { // a cost no state admits never reaches Redis
		return algorithms.DecideOverCapacityAt(callerNow(now), reqs, func(fit []algorithms.Request) ([]algorithms.Decision, error) {
			return s.run(ctx, now, fit)
		})
	}
	if _, cluster := s.client.(*redis.ClusterClient); cluster && len(reqs) > 1 {
		return s.runPerSlot(ctx, now, reqs)
	}
	ds, err := s.call(ctx, now, modeConsume, reqs)
	return ds, err
}

// callerNow is now (µs, as AllowAt passes it), or for "" (Redis TIME,
// not read for a request that never reaches Redis) this instance's clock:
// a calendar zone's remaining time in OverCapacityAt.
func callerNow(now string) int64 {
	if now != "" {
		if us, err := strconv.ParseInt(now, 10, 64); err == nil {
			return us
		}
	}
	return time.Now().UnixMicro()
}

// call decides reqs, whose keys share a slot, in mode, through the
// batcher; each decision carries the time it was taken at.
func (s *Store) call(ctx context.Context, now, mode string, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	p := s.batcher.get()
	p.now, p.mode, p.reqs = now, mode, reqs
	if err := s.batcher.do(ctx, p); err != nil {
		s.batcher.release(p)
		return nil, err // p.ds may still be written by a call p gave up on
	}
	ds := p.ds
	s.batcher.release(p)
	return ds, nil
}

// Interface guards: the whole store contract, and every optional
// capability (functions.go, top.go, resets.go, settle.go).
var (
	_ algorithms.Store            = (*Store)(nil)
	_ algorithms.ServerDescriber  = (*Store)(nil)
	_ algorithms.TopSharer        = (*Store)(nil)
	_ algorithms.ResetSubscriber  = (*Store)(nil)
	_ algorithms.GiveBackReporter = (*Store)(nil)
	_ algorithms.QuotaLender      = (*Store)(nil)
)
