package sluice

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/redisstore"
)

// subscribeResets subscribes to the resets announced on client's Redis,
// which drop cached denials from st's deny cache, and registers the
// subscription with the caddy_rate_limit_reset_subscription_live gauge.
// A failed subscription is logged at each try (the retries back off to
// one a minute), and its recovery once. Each subscription after the first
// drops every cached denial of st's deny cache: resets announced while it
// was down are lost.
func subscribeResets(client redis.UniversalClient, st stores, logger *zap.Logger) *redisstore.ResetSubscription {
	var failing atomic.Bool
	failed := func(err error, retry time.Duration) {
		failing.Store(true)
		logger.Warn("redis reset subscription failed: resets and ban lifts of other instances do not reach this instance's cached denials until it works",
			zap.String("redis", st.label), zap.String("channel", redisstore.ResetChannel), zap.Duration("retry_in", retry), zap.Error(err))
	}
	var subscribed atomic.Bool
	up := func() {
		if subscribed.Swap(true) {
			// the resets published while the subscription was down (up to a
			// minute before a dead connection is noticed) never arrive:
			// drop every cached denial, a ban lifted meanwhile too
			st.cache.ForgetAll()
		}
		if failing.Swap(false) {
			logger.Info("redis reset subscription up", zap.String("redis", st.label), zap.String("channel", redisstore.ResetChannel))
		}
	}
	resets := redisstore.SubscribeResets(client, st.cache.Forget, failed, up)
	resetSubscriptions.Store(resets, st.label)
	return resets
}

// resetSubscriptions are the reset subscriptions of the Redis clients in
// use, with their Redis's label, read by the
// caddy_rate_limit_reset_subscription_live gauge; a shared client adds its
// own and removes it when it closes.
var resetSubscriptions sync.Map // interface{ Live() bool } → label string

// subscriptionDesc is caddy_rate_limit_reset_subscription_live's description.
var subscriptionDesc = prometheus.NewDesc(prometheus.BuildFQName(ns, sub, "reset_subscription_live"),
	"1 while this instance is subscribed to the reset channel of the Redis labelled (other instances' resets and ban lifts reach its cached denials), else 0.", []string{"redis"}, nil)

// subscriptionGauge is caddy_rate_limit_reset_subscription_live{redis}:
// per Redis, 1 while every client talking to it is subscribed to its
// reset channel, 0 while one is not.
type subscriptionGauge struct{}

func (subscriptionGauge) Describe(ch chan<- *prometheus.Desc) { ch <- subscriptionDesc }

func (subscriptionGauge) Collect(ch chan<- prometheus.Metric) {
	live := map[string]float64{}
	resetSubscriptions.Range(func(s, label any) bool {
		l, _ := label.(string)
		if _, seen := live[l]; !seen {
			live[l] = 1
		}
		if s, ok := s.(interface{ Live() bool }); !ok || !s.Live() {
			live[l] = 0
		}
		return true
	})
	for l, v := range live {
		ch <- prometheus.MustNewConstMetric(subscriptionDesc, prometheus.GaugeValue, v, l)
	}
}
