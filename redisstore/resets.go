package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
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
// down when the message is sent (it reconnects by itself) keeps its
// cached denial until it ends.
const ResetChannel = "sluice:reset"

// SubscribeResets calls forget with each key reset on client's Redis (by
// any instance's Reset, this one's included) until the returned function
// is called. go-redis resubscribes by itself after a lost connection.
func SubscribeResets(client redis.UniversalClient, forget func(key string)) (stop func()) {
	sub := client.Subscribe(context.Background(), ResetChannel)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for msg := range sub.Channel() {
			forget(msg.Payload)
		}
	}()
	return func() {
		_ = sub.Close()
		<-done
	}
}
