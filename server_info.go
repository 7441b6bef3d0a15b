package sluice

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/redisstore"
)

// serverInfo is what a shared client knows of the Redis that answers it:
// the server's name and version (INFO server) and whether decisions run as
// a Function or through EVALSHA. It is learned once, when the client first
// reaches Redis (at start, or later when Redis was down then), logged once,
// and shown by the admin API's zone listing.
type serverInfo struct {
	client redis.UniversalClient
	store  *redisstore.Store
	logger *zap.Logger
	addrs  []string

	desc     atomic.Pointer[serverDesc]
	mu       sync.Mutex   // one look at a time
	failedAt atomic.Int64 // when the last look failed, Unix nanoseconds
}

// serverDesc is one look's answer.
type serverDesc struct {
	Server    string // e.g. "valkey 8.1.1", "redis 7.0.15"
	Functions bool
}

// describe returns what is known of the server, looking (and logging)
// first when nothing is yet: it loads the decide code (Warm), which tells
// Functions from EVALSHA, and reads INFO server. Nil, with the error, when
// Redis does not answer within ctx, or did not a moment ago (describeRetry).
func (s *serverInfo) describe(ctx context.Context) (*serverDesc, error) {
	if d := s.desc.Load(); d != nil {
		return d, nil
	}
	if time.Since(time.Unix(0, s.failedAt.Load())) < describeRetry {
		return nil, errNotYet // a listing of many zones pays for one failed look
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.desc.Load(); d != nil {
		return d, nil
	}
	if err := s.store.Warm(ctx); err != nil {
		s.failedAt.Store(time.Now().UnixNano())
		return nil, err
	}
	reply, err := s.client.Info(ctx, "server").Result()
	if err != nil {
		s.failedAt.Store(time.Now().UnixNano())
		return nil, fmt.Errorf("INFO server: %w", err)
	}
	d := &serverDesc{Server: serverName(reply), Functions: s.store.Functions()}
	s.desc.Store(d)
	decisions := "evalsha"
	if d.Functions {
		decisions = "function"
	}
	s.logger.Info("redis server answered",
		zap.Strings("addresses", s.addrs), zap.String("server", d.Server),
		zap.Bool("functions", d.Functions), zap.String("decisions", decisions))
	return d, nil
}

// errNotYet: a look failed less than describeRetry ago.
var errNotYet = errors.New("redis did not answer a moment ago")

// serverName reads "<name> <version>" from an INFO server reply: Valkey
// says server_name:valkey and valkey_version (its redis_version is the
// Redis version it is compatible with); Redis says only redis_version.
func serverName(info string) string {
	fields := map[string]string{}
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	name := fields["server_name"]
	if name == "" {
		name = "redis"
	}
	version := fields[name+"_version"]
	if version == "" {
		version = fields["redis_version"]
	}
	if version == "" {
		return name
	}
	return name + " " + version
}

// adminDescribeTimeout bounds the look the zone listing takes when the
// server is not known yet (Redis was down at start).
const adminDescribeTimeout = time.Second

// describeRetry is how long after a failed look the next one waits.
const describeRetry = 5 * time.Second
