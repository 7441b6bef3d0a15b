package sluice

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/redisstore"
)

// The Redis backend, wired in one place: a handler's redis block
// (RedisConfig) connects a client shared by every handler with the same
// settings, and on it the Redis store (redisstore), guarded by the deny
// cache and the breaker (remoteStores), with what the store can do besides
// the contract: describing its server, shared top offenders (flushed by
// flushTop) and the reset subscription. What the root package knows of
// go-redis's errors is in redis_errors.go; the rest of the package reaches
// Redis only through algorithms.Store and its optional interfaces.

// clients holds one Redis client per distinct connection setting, shared by
// every handler that uses it and kept across config reloads: the new config
// takes its reference before the old one is cleaned up.
var clients = caddy.NewUsagePool()

// connect returns the shared client for this configuration, with the key
// under which it is shared. The key is made of the expanded settings, so a
// changed {env.REDIS_PASSWORD} takes a new client. It fails when Redis
// refuses the credentials, or the user a command Sluice sends on a key of
// the prefix (redis_auth.go); a Redis that does not answer is no failure.
func (c *RedisConfig) connect(logger *zap.Logger) (*sharedClient, string, error) {
	opts, err := c.options()
	if err != nil {
		return nil, "", fmt.Errorf("redis: %w", err)
	}
	key, err := c.poolKey()
	if err != nil {
		return nil, "", err
	}
	creds := credentialsOf(c, opts)
	val, _, err := clients.LoadOrNew(key, func() (caddy.Destructor, error) {
		return newSharedClient(opts, creds, time.Duration(c.Timeout), logger)
	})
	if err != nil {
		return nil, "", err
	}
	shared := val.(*sharedClient)
	if err := shared.checkACL(c.KeyPrefix, creds); err != nil {
		_, _ = clients.Delete(key)
		return nil, "", err
	}
	return shared, key, nil
}

// newSharedClient connects a client with opts and builds on it the Redis
// store, whose refunds take at most timeout, its stores (remoteStores),
// and what runs beside them until Destruct: the reset subscription, the
// breaker's gauge and the top flushing. It looks at the server first
// (lookAtStart): credentials or commands Redis refuses (creds names the
// options) fail it; a Redis that does not answer is a warning, and is
// looked at again in the background (warm).
func newSharedClient(opts *redis.UniversalOptions, creds credentials, timeout time.Duration, logger *zap.Logger) (*sharedClient, error) {
	logger.Info("connecting to redis", zap.Strings("addresses", opts.Addrs), zap.String("master_name", opts.MasterName))
	installRedisLogger() // go-redis's own lines go to Caddy's log
	client := redis.NewUniversalClient(opts)
	store := redisstore.New(client, redisstore.Options{RefundTimeout: timeout})
	shared := &sharedClient{client: client, done: make(chan struct{}), stores: remoteStores("redis", store, redisLabel(opts), opts.Addrs, logger)}
	if err := lookAtStart(client, shared.stores.server); err != nil {
		if authErr := creds.authError(err); authErr != nil {
			_ = shared.stores.leases.Close()
			_ = client.Close()
			return nil, authErr
		}
		logger.Warn("redis not reachable at start; failure_mode applies until it is",
			zap.Strings("addresses", opts.Addrs), zap.Error(err))
		go warm(shared.stores.server, shared.done)
	}
	// an admin DELETE on any instance (a ban lifted) ends the cached
	// denials of its key here too (redisstore.ResetChannel says why)
	shared.resets = subscribeResets(store, shared.stores, logger)
	trackBreaker(shared.stores.breaker, shared.stores.label)
	go flushTop(shared, logger) // stops on Destruct (done)
	return shared, nil
}

// lookAtStart looks at the server while the config is provisioned, within
// provisionLookTimeout: a PING first, which Redis refuses (NOAUTH) to a
// client without the password it requires, where a longer first command
// would only read as a protocol error; then which server it is
// (serverInfo, which logs it).
func lookAtStart(client redis.UniversalClient, server *serverInfo) error {
	ctx, cancel := context.WithTimeout(context.Background(), provisionLookTimeout)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		return err
	}
	_, err := server.describe(ctx)
	return err
}

// checkACL fails, naming the user, when Redis says (ACL DRYRUN) that the
// user may not run a command Sluice sends on a key under prefix; nothing
// when Redis has not answered yet, or cannot say.
func (s *sharedClient) checkACL(prefix string, creds credentials) error {
	d := s.stores.server.desc.Load()
	if d == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), provisionLookTimeout)
	defer cancel()
	_, cluster := s.client.(*redis.ClusterClient)
	denied, err := dryRunACL(ctx, s.client, creds.user, prefix, d.Functions, cluster)
	if err != nil || len(denied) == 0 { // an error: Redis stopped answering, which failure_mode covers
		return nil
	}
	return creds.permissionError(strings.Join(denied, "; "))
}

// sharedClient is one Redis client with its stores, shared by every
// handler with the same connection settings; the pool closes it on its
// last release.
type sharedClient struct {
	client redis.UniversalClient
	stores stores
	done   chan struct{} // closed on Destruct: warm stops looking, flushTop flushes once more and stops
	top    topFlushes    // the zones flushTop flushes, and its end
	// resets is the subscription to resets of other instances
	resets algorithms.Subscription
}

// closeGrace is how long a client outlives its last config: on a reload,
// requests of the old config may still be deciding with it.
const closeGrace = 10 * time.Second

func (s *sharedClient) Destruct() error {
	untrackBreaker(s.stores.breaker)
	untrackSubscription(s.resets)
	close(s.done)
	s.awaitLastTopFlush()
	s.stores.outage.stop()      // a recovery line held back is logged now
	_ = s.stores.leases.Close() // gives back what is left of every quota lease
	time.AfterFunc(closeGrace, func() {
		s.resets.Stop()
		_ = s.client.Close()
	})
	return nil
}

// subscribeResets subscribes to the resets announced on the store's Redis,
// which drop cached denials from st's deny cache and quota leases, and registers the
// subscription with the caddy_rate_limit_reset_subscription_live gauge.
// A failed subscription is logged at each try (the retries back off to
// one a minute), and its recovery once. Each subscription drops every
// cached denial of st's deny cache and every quota lease: resets
// announced while there was none are lost.
func subscribeResets(store algorithms.ResetSubscriber, st stores, logger *zap.Logger) algorithms.Subscription {
	var failing atomic.Bool
	failed := func(err error, retry time.Duration) {
		failing.Store(true)
		logger.Warn("redis reset subscription failed: resets and ban lifts of other instances do not reach this instance's cached denials until it works",
			zap.String("redis", st.label), zap.String("channel", redisstore.ResetChannel), zap.Duration("retry_in", retry), zap.Error(err))
	}
	up := func() {
		// the resets published while there was no subscription (since
		// start, or up to a minute before a dead connection is noticed)
		// never arrive: drop every cached denial, a ban lifted meanwhile
		// too (at the first subscription the cache is all but empty)
		st.cache.ForgetAll()
		if st.leases != nil {
			st.leases.ForgetAll()
		}
		if failing.Swap(false) {
			logger.Info("redis reset subscription up", zap.String("redis", st.label), zap.String("channel", redisstore.ResetChannel))
		}
	}
	forget := func(key string) { // the key's cached denials and quota leases
		st.cache.Forget(key)
		if st.leases != nil {
			st.leases.Forget(key)
		}
	}
	resets := store.SubscribeResets(forget, failed, up)
	trackSubscription(resets, st.label)
	return resets
}
