package redisstore

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// The top offenders on Redis: each instance adds the denials its sketch
// counted (algorithms.TopKeys) to one sorted set per zone and minute,
// <key_prefix>top:{<zone>:<unix minute>}, which expires TopTTL after its
// minute began. The hash tag is the zone and the minute, so one flush of a
// zone writes one slot (one call on Cluster too), and the minutes of a
// zone spread over the cluster.
const (
	// TopMinutes is how many minutes before the current one Read sums:
	// with the current minute, the sets cover the last 5 to 6 minutes.
	TopMinutes = 5
	// TopTTL keeps a minute's set until Read no longer reads it, and a
	// minute more for clocks that differ.
	TopTTL = (TopMinutes + 2) * time.Minute
	// topReadPerSet bounds how many entries Read takes of each set: the
	// most denied ones, far more than the 100 the admin API shows.
	topReadPerSet = 1000
)

// TopSets are one zone's top-offender sets on a Redis: Prefix is the
// key_prefix, Zone the zone's name.
type TopSets struct {
	Client redis.UniversalClient
	Prefix string
	Zone   string
}

// TopKey is the sorted set of zone's denials in the minute of now.
func TopKey(prefix, zone string, now time.Time) string {
	return topKeyOfMinute(prefix, zone, now.Unix()/60)
}

func topKeyOfMinute(prefix, zone string, minute int64) string {
	return prefix + "top:{" + zone + ":" + strconv.FormatInt(minute, 10) + "}"
}

// Add adds entries to the set of the minute of now, in one pipelined
// call: ZINCRBY per entry, then the set's expiry.
func (t TopSets) Add(ctx context.Context, now time.Time, entries []algorithms.Counted) error {
	if len(entries) == 0 {
		return nil
	}
	minute := now.Unix() / 60
	key := topKeyOfMinute(t.Prefix, t.Zone, minute)
	expireAt := time.Unix(minute*60, 0).Add(TopTTL)
	_, err := t.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, e := range entries {
			p.ZIncrBy(ctx, key, float64(e.Count), e.Key)
		}
		p.ExpireAt(ctx, key, expireAt)
		return nil
	})
	return err
}

// Read sums the sets of the minute of now and the TopMinutes before
// it, reading the most denied entries of each (ZREVRANGE WITHSCORES, which
// every Redis and Valkey has; ZUNION needs 6.2), and returns the keys by
// count descending, then key ascending. Err is 0: the instances add only
// the counts each key surely had (algorithms.Guaranteed), so the sums are
// guaranteed counts too.
func (t TopSets) Read(ctx context.Context, now time.Time) ([]algorithms.Counted, error) {
	minute := now.Unix() / 60
	cmds := make([]*redis.ZSliceCmd, 0, TopMinutes+1)
	_, err := t.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for m := minute - TopMinutes; m <= minute; m++ {
			cmds = append(cmds, p.ZRevRangeWithScores(ctx, topKeyOfMinute(t.Prefix, t.Zone, m), 0, topReadPerSet-1))
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, err
	}
	var all []algorithms.Counted
	for _, cmd := range cmds {
		zs, err := cmd.Result()
		if err != nil && err != redis.Nil {
			return nil, err
		}
		for _, z := range zs {
			key, _ := z.Member.(string)
			if z.Score >= 1 {
				all = append(all, algorithms.Counted{Key: key, Count: uint64(z.Score)})
			}
		}
	}
	return algorithms.MergeCounted(0, all), nil
}

// AddTop adds counts to zone's set of the minute of now (TopSets.Add).
func (s *Store) AddTop(ctx context.Context, prefix, zone string, now time.Time, counts []algorithms.Counted) error {
	return TopSets{Client: s.client, Prefix: prefix, Zone: zone}.Add(ctx, now, counts)
}

// ReadTop sums zone's sets of the last minutes (TopSets.Read).
func (s *Store) ReadTop(ctx context.Context, prefix, zone string, now time.Time) ([]algorithms.Counted, error) {
	return TopSets{Client: s.client, Prefix: prefix, Zone: zone}.Read(ctx, now)
}
