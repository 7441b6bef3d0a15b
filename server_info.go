package sluice

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// serverInfo is what a shared client knows of the server that answers its
// store (an algorithms.ServerDescriber): the server's name and version and
// whether decisions run as a Function or through EVALSHA. It is learned
// once, when the client first reaches the server (at start, or later when
// it was down then), logged once, and shown by the admin API's zone
// listing.
type serverInfo struct {
	describer algorithms.ServerDescriber
	logger    *zap.Logger
	addrs     []string

	desc     atomic.Pointer[algorithms.ServerDescription]
	mu       sync.Mutex   // one look at a time
	failedAt atomic.Int64 // when the last look failed, Unix nanoseconds
}

// describe returns what is known of the server, looking (and logging)
// first when nothing is yet: DescribeServer loads the decide code, which
// tells Functions from EVALSHA, and reads the server's name. Nil, with the
// error, when the server does not answer within ctx, or did not a moment
// ago (describeRetry).
func (s *serverInfo) describe(ctx context.Context) (*algorithms.ServerDescription, error) {
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
	desc, err := s.describer.DescribeServer(ctx)
	if err != nil {
		s.failedAt.Store(time.Now().UnixNano())
		return nil, err
	}
	d := &desc
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

// adminDescribeTimeout bounds the look the zone listing takes when the
// server is not known yet (Redis was down at start).
const adminDescribeTimeout = time.Second

// describeRetry is how long after a failed look the next one waits.
const describeRetry = 5 * time.Second

// warmTimeout bounds each look warm takes.
const warmTimeout = 5 * time.Second

// warm looks at the server every describeRetry, in the background, after
// the look at start failed (a Redis that is down then is no reason to fail
// the config: failure_mode covers it), until it answers or the client is
// closed (done). It logs which server answered (serverInfo); requests
// meanwhile log why they fail (failureLog), credentials Redis refuses too.
func warm(server *serverInfo, done <-chan struct{}) {
	tick := time.NewTicker(describeRetry)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), warmTimeout)
		_, err := server.describe(ctx)
		cancel()
		if err == nil {
			return
		}
	}
}
