package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// ResetChannel is the Redis Pub/Sub channel on which Reset announces the
// store key it reset (state deleted, ban lifted), so that every instance
// sharing this Redis drops its cached denials of that key.
//
// Why a channel, not a generation number read with each decision: a ban
// is cached in each instance's deny cache until it ends, so that a banned
// flood costs Redis nothing; a generation read per decision would cost
// every cached denial a call again. A message costs nothing per request
// and reaches every subscriber at once. The keys it carries are full store
// keys (key_prefix included), so one channel serves every key_prefix on a
// Redis; an instance that holds no denial of a key does nothing with it.
// On Redis Cluster a PUBLISH reaches the subscribers of every node. The
// trade: Pub/Sub delivers at most once; an instance whose subscription is
// down when the message is sent (ResetSubscription tries again) does not
// hear of it, so it drops every cached denial when it is subscribed again
// (the up callback, in the sluice package).
const ResetChannel = "sluice:reset"

// The reset subscription's retries: the first after resetRetryMin, each
// next one twice as late, up to resetRetryMax; back to resetRetryMin once
// a subscription was confirmed. A subscription that hears nothing for
// resetHealthCheck sends a PING, and is taken for lost when that is not
// answered within another resetHealthCheck.
const (
	resetRetryMin    = time.Second
	resetRetryMax    = time.Minute
	resetHealthCheck = 30 * time.Second
)

// ResetSubscription keeps this instance subscribed to ResetChannel: it
// subscribes in the background, and after a failure (Redis down, or a
// user without the channel's permission) tries again with backoff until
// Stop. Live tells whether it is subscribed now.
type ResetSubscription struct {
	client redis.UniversalClient
	forget func(key string)
	failed func(err error, retry time.Duration)
	up     func()
	live   atomic.Bool

	mu      sync.Mutex
	sub     *redis.PubSub // the current subscription, closed by Stop
	stopped bool
	stop    chan struct{}
	done    chan struct{}
}

// SubscribeResets calls forget with each key reset on client's Redis (by
// any instance's Reset, this one's included) until Stop. Each failed
// subscription calls failed with its error and the wait before the next
// try; each confirmed one calls up. Both may be nil.
func SubscribeResets(client redis.UniversalClient, forget func(key string), failed func(err error, retry time.Duration), up func()) *ResetSubscription {
	s := &ResetSubscription{client: client, forget: forget, failed: failed, up: up,
		stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

// SubscribeResets subscribes to the resets announced on the store's
// Redis (SubscribeResets).
func (s *Store) SubscribeResets(forget func(key string), failed func(err error, retry time.Duration), up func()) algorithms.Subscription {
	return SubscribeResets(s.client, forget, failed, up)
}

// Live reports whether Redis confirmed the subscription and it has not
// failed since.
func (s *ResetSubscription) Live() bool { return s.live.Load() }

// Stop ends the subscription and its retries, and waits for them to end.
func (s *ResetSubscription) Stop() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		<-s.done
		return
	}
	s.stopped = true
	if s.sub != nil {
		_ = s.sub.Close()
	}
	s.mu.Unlock()
	close(s.stop)
	<-s.done
}

func (s *ResetSubscription) run() {
	defer close(s.done)
	retry := resetRetryMin
	for {
		wasLive, err := s.session()
		s.live.Store(false)
		if s.isStopped() {
			return
		}
		if wasLive {
			retry = resetRetryMin
		}
		if s.failed != nil {
			s.failed(err, retry)
		}
		t := time.NewTimer(retry)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
		retry = min(2*retry, resetRetryMax)
	}
}

func (s *ResetSubscription) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// session subscribes once and hands on what it hears until the
// subscription fails (or Stop closes it); it reports whether Redis
// confirmed it, and why it ended.
func (s *ResetSubscription) session() (wasLive bool, err error) {
	ctx := context.Background()
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return false, nil
	}
	sub := s.client.Subscribe(ctx) // no channel yet: nothing dialled under the lock
	s.sub = sub
	s.mu.Unlock()
	defer sub.Close()
	if err := sub.Subscribe(ctx, ResetChannel); err != nil {
		return false, fmt.Errorf("SUBSCRIBE %s: %w", ResetChannel, channelHint(err))
	}
	pinged := false
	for {
		msg, err := sub.ReceiveTimeout(ctx, resetHealthCheck)
		var netErr net.Error
		switch {
		case err == nil:
			pinged = false
		case errors.As(err, &netErr) && netErr.Timeout() && !pinged:
			pinged = true
			if err := sub.Ping(ctx); err != nil {
				return wasLive, fmt.Errorf("PING on the subscription: %w", err)
			}
			continue
		default:
			return wasLive, fmt.Errorf("SUBSCRIBE %s: %w", ResetChannel, channelHint(err))
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" && !wasLive {
				wasLive = true
				if s.up != nil { // before Live says so: live means up has run
					s.up()
				}
				s.live.Store(true)
			}
		case *redis.Message:
			s.forget(m.Payload)
		}
	}
}

// channelHint adds to Redis's refusal of PUBLISH or SUBSCRIBE on
// ResetChannel the ACL rules the user lacks.
func channelHint(err error) error {
	if !redis.HasErrorPrefix(err, "NOPERM") {
		return err
	}
	if strings.Contains(err.Error(), "channel") {
		return fmt.Errorf("%w: the Redis user needs the permission of channel %s (ACL rule &%s)", err, ResetChannel, ResetChannel)
	}
	return fmt.Errorf("%w: the Redis user needs the commands PUBLISH and SUBSCRIBE (ACL rules +publish +subscribe) and the channel %s (&%s)", err, ResetChannel, ResetChannel)
}
