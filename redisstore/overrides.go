package redisstore

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// The index of a zone's overrides: a sorted set per zone,
// OverrideIndexKey(<key_prefix><zone>:), whose members are the hashes of
// the keys that have an override (the hash inside their store key's hash
// tag, never the key itself). SetOverride adds a key's hash and
// ClearOverride removes it in the MULTI that sets or deletes the override;
// ListOverrides reads the index a page at a time and each listed key's
// override hash (OverrideKey), and drops from the index the hashes whose
// override ended or vanished. The expanded key is kept only where the
// admin API passes it (algorithms.WithOverrideKey: the handler's log_key),
// in the override's own hash (field k), so it lives and ends with the
// override.
//
// Members are ordered by hash: each has the score hashScore (its first
// bytes), which keeps byte order, and members of equal score are ordered
// by their bytes. A page is then a ZRANGEBYSCORE from the previous page's
// last hash: no command beyond those the store already needs.
//
// On Cluster the index is one key, so one slot, and a MULTI cannot span
// slots: SetOverride adds the hash in a call of its own before the MULTI,
// ClearOverride removes it after, so a failure between the two leaves an
// entry without an override, which the next listing drops, never an
// override missing from the index.

// OverrideIndexKey is the index of the overrides of the zone whose keys
// start with prefix ("<key_prefix><zone>:"). It cannot be a key's state,
// ban or override: those follow the prefix with "{".
func OverrideIndexKey(prefix string) string { return prefix + "overrides" }

// indexOf is the index of the zone of key ("<prefix>{<hash>}…") and key's
// member in it, or ok false for a key of another form (it is not
// indexed).
func indexOf(key string) (index, hash string, ok bool) {
	open := strings.LastIndexByte(key, '{')
	if open < 0 {
		return "", "", false
	}
	end := strings.IndexByte(key[open:], '}')
	if end <= 1 {
		return "", "", false
	}
	return OverrideIndexKey(key[:open]), key[open+1 : open+end], true
}

// scoreBytes is how many leading bytes of a member make its score: 6
// bytes are 48 bits, which a float64 holds exactly.
const scoreBytes = 6

// hashScore is member's score in its index: its first scoreBytes bytes as
// a big-endian number (missing bytes 0), so that a member before another
// in byte order never has a greater score.
func hashScore(member string) int64 {
	var s int64
	for i := range scoreBytes {
		s <<= 8
		if i < len(member) {
			s |= int64(member[i])
		}
	}
	return s
}

// clustered reports whether s is on Redis Cluster.
func (s *Store) clustered() bool {
	_, ok := s.client.(*redis.ClusterClient)
	return ok
}

// indexOverride adds key to its zone's index: in p, the MULTI that sets
// key's override; on Cluster in a call of its own, now (before the
// MULTI).
func (s *Store) indexOverride(ctx context.Context, p redis.Pipeliner, key string) error {
	index, hash, ok := indexOf(key)
	if !ok {
		return nil
	}
	z := redis.Z{Score: float64(hashScore(hash)), Member: hash}
	if s.clustered() {
		return s.client.ZAdd(ctx, index, z).Err()
	}
	p.ZAdd(ctx, index, z)
	return nil
}

// unindexOverride removes key from its zone's index in p, the MULTI that
// deletes key's override; on Cluster unindexCleared does it after.
func (s *Store) unindexOverride(ctx context.Context, p redis.Pipeliner, key string) {
	if index, hash, ok := indexOf(key); ok && !s.clustered() {
		p.ZRem(ctx, index, hash)
	}
}

// unindexCleared removes key from its zone's index on Cluster, after its
// override was deleted (pruneIndex: a SetOverride of key meanwhile keeps
// its entry). A failure leaves an entry that the next listing drops, so
// it is not the clear's.
func (s *Store) unindexCleared(ctx context.Context, key string) {
	if index, hash, ok := indexOf(key); ok && s.clustered() {
		_ = s.pruneIndex(ctx, index, []string{hash}, 0)
	}
}

// ListOverrides lists the overrides in force of the zone whose keys start
// with prefix, as algorithms.OverrideLister says: a ZRANGEBYSCORE of its
// index (OverrideIndexKey) a page at a time and, pipelined (on Cluster,
// one round trip per node), an HMGET of each listed key's override, on
// Redis's clock (TIME). Hashes whose override ended or vanished are
// dropped from the index (pruneIndex) and do not count toward n.
func (s *Store) ListOverrides(ctx context.Context, prefix, after string, n int) ([]algorithms.ListedOverride, string, error) {
	n = max(n, 1)
	now, err := s.client.Time(ctx).Result()
	if err != nil {
		return nil, "", err
	}
	nowUS := now.UnixMicro()
	index := OverrideIndexKey(prefix)
	var list []algorithms.ListedOverride
	var stale []string
	cursor, more := after, true
	for more && len(list) < n {
		room := n - len(list)
		members, err := s.indexPage(ctx, index, cursor, room+1)
		if err != nil {
			return nil, "", err
		}
		more = len(members) > room
		look := members[:min(len(members), room)]
		if len(look) == 0 {
			break
		}
		listed, ended, err := s.readOverrides(ctx, prefix, look, nowUS)
		if err != nil {
			return nil, "", err
		}
		list, stale = append(list, listed...), append(stale, ended...)
		cursor = look[len(look)-1]
	}
	if err := s.pruneIndex(ctx, index, stale, nowUS); err != nil {
		return nil, "", err
	}
	if !more {
		cursor = ""
	}
	return list, cursor, nil
}

// indexPage returns up to limit members of index after the member after
// ("": from the first), in byte order.
func (s *Store) indexPage(ctx context.Context, index, after string, limit int) ([]string, error) {
	low := "-inf"
	if after != "" {
		low = strconv.FormatInt(hashScore(after), 10) // inclusive: members of its score before it are skipped below
	}
	var out []string
	for offset := int64(0); ; {
		want := int64(limit - len(out))
		got, err := s.client.ZRangeByScore(ctx, index, &redis.ZRangeBy{Min: low, Max: "+inf", Offset: offset, Count: want}).Result()
		if err != nil {
			return nil, err
		}
		for _, m := range got {
			if m > after {
				out = append(out, m)
			}
		}
		if int64(len(got)) < want || len(out) >= limit {
			return out[:min(len(out), limit)], nil
		}
		offset += int64(len(got))
	}
}

// overrideFields are the fields of an override's hash ListOverrides
// reads: events, capacity, end (µs, absent: none) and the expanded key
// (absent: not kept).
var overrideFields = []string{"e", "b", "x", "k"}

// readOverrides reads the overrides of hashes (members of the index of
// prefix's zone) in one pipeline, and returns those in force at nowUS and
// the hashes whose override ended or is gone.
func (s *Store) readOverrides(ctx context.Context, prefix string, hashes []string, nowUS int64) (listed []algorithms.ListedOverride, ended []string, err error) {
	cmds := make([]*redis.SliceCmd, len(hashes))
	if _, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, h := range hashes {
			cmds[i] = p.HMGet(ctx, OverrideKey(prefix+"{"+h+"}"), overrideFields...)
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}
	for i, h := range hashes {
		v := cmds[i].Val()
		events, okE := fieldInt(v, 0)
		capacity, _ := fieldInt(v, 1)
		end, hasEnd := fieldInt(v, 2)
		if !okE || events < 1 || (hasEnd && end <= nowUS) {
			ended = append(ended, h)
			continue
		}
		o := algorithms.ListedOverride{Hash: h, Override: algorithms.Override{Events: int32(events), Burst: int32(capacity)}}
		if hasEnd {
			o.ExpiresIn = time.Duration(end-nowUS) * time.Microsecond
		}
		if k, ok := v[3].(string); ok {
			o.Key = k
		}
		listed = append(listed, o)
	}
	return listed, ended, nil
}

// fieldInt is the whole number in v[i] (an HMGET's answer), and whether
// there is one.
func fieldInt(v []any, i int) (int64, bool) {
	if i >= len(v) {
		return 0, false
	}
	s, ok := v[i].(string)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// pruneIndex drops hashes from index, then puts back those whose
// override is in force at nowUS after all (0: whatever its end): a
// SetOverride that ran between the read that found it ended and the drop
// added its hash before the drop, and must stay listed. An entry put back
// for an override cleared meanwhile is dropped by the next listing.
func (s *Store) pruneIndex(ctx context.Context, index string, hashes []string, nowUS int64) error {
	if len(hashes) == 0 {
		return nil
	}
	members := make([]any, len(hashes))
	for i, h := range hashes {
		members[i] = h
	}
	if err := s.client.ZRem(ctx, index, members...).Err(); err != nil {
		return err
	}
	prefix := strings.TrimSuffix(index, "overrides")
	cmds := make([]*redis.SliceCmd, len(hashes))
	if _, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, h := range hashes {
			cmds[i] = p.HMGet(ctx, OverrideKey(prefix+"{"+h+"}"), "e", "x")
		}
		return nil
	}); err != nil {
		return err
	}
	var back []redis.Z
	for i, h := range hashes {
		v := cmds[i].Val()
		_, set := fieldInt(v, 0)
		end, hasEnd := fieldInt(v, 1)
		if set && (!hasEnd || nowUS == 0 || end > nowUS) {
			back = append(back, redis.Z{Score: float64(hashScore(h)), Member: h})
		}
	}
	if len(back) == 0 {
		return nil
	}
	return s.client.ZAdd(ctx, index, back...).Err()
}

// Interface guard
var _ algorithms.OverrideLister = (*Store)(nil)
