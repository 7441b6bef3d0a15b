package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// sentinelReadyTimeout bounds how long the replica may take to sync and the
// sentinels to discover the replica and each other (hello messages go out
// every 2 s).
const sentinelReadyTimeout = 20 * time.Second

// Sentinels is a Sentinel-managed setup: a master, one replica of it, and
// sentinels that monitor the master under MasterName with a quorum of 2.
type Sentinels struct {
	MasterName string
	Master     *Server
	Replica    *Server
	Sentinels  []*Server
}

// StartSentinels starts a master, a replica and n sentinels (n ≥ 2), and
// waits until the replica is in sync and every sentinel sees the replica and
// the n-1 other sentinels. The sentinels mark a master down after 1 s.
func StartSentinels(t testing.TB, n int) *Sentinels {
	t.Helper()
	if n < 2 {
		t.Fatalf("StartSentinels: need at least 2 sentinels for a quorum of 2, got %d", n)
	}
	s := &Sentinels{MasterName: "mymaster"}
	s.Master = Start(t)
	host, port, _ := net.SplitHostPort(s.Master.Addr)
	s.Replica = Start(t, "--replicaof", host, port)
	for range n {
		s.Sentinels = append(s.Sentinels, startSentinel(t, s.MasterName, s.Master.Addr))
	}
	s.waitReplicaSynced(t, s.Replica.Addr)
	for _, sen := range s.Sentinels {
		s.waitSentinelSees(t, sen.Addr, s.Replica.Addr, n-1)
	}
	return s
}

// startSentinel writes a sentinel config into a temporary directory (a
// sentinel rewrites its config, so it must be a file of its own) and runs
// redis-server on it in sentinel mode.
func startSentinel(t testing.TB, masterName, masterAddr string) *Server {
	t.Helper()
	bin := Binary(t)
	port := FreePort(t)
	dir := t.TempDir()
	host, mport, _ := net.SplitHostPort(masterAddr)
	resolve := "sentinel resolve-hostnames no"
	if v := versionOf(t, bin); v.Name == "redis" && (v.Major < 6 || v.Major == 6 && v.Minor < 2) {
		resolve = "" // Redis 6.0 has no such option (and never resolves)
	}
	conf := strings.Join([]string{
		"port " + strconv.Itoa(port),
		"bind 127.0.0.1",
		"dir " + dir,
		resolve,
		fmt.Sprintf("sentinel monitor %s %s %s 2", masterName, host, mport),
		"sentinel down-after-milliseconds " + masterName + " 1000",
		"sentinel failover-timeout " + masterName + " 5000",
		"",
	}, "\n")
	path := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatalf("writing sentinel config: %v", err)
	}
	s := &Server{
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Dir:  dir,
		args: []string{bin, path, "--sentinel"},
	}
	s.start(t) // a sentinel answers PING too
	t.Cleanup(s.Stop)
	return s
}

// SentinelAddrs are the sentinels' addresses.
func (s *Sentinels) SentinelAddrs() []string { return addrsOf(s.Sentinels) }

// SentinelClient returns a client for sentinel i, closed at the test's end.
func (s *Sentinels) SentinelClient(t testing.TB, i int) *redis.SentinelClient {
	t.Helper()
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinels[i].Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// MasterAddr asks the sentinel behind c for the master's address.
func (s *Sentinels) MasterAddr(ctx context.Context, c *redis.SentinelClient) (string, error) {
	hp, err := c.GetMasterAddrByName(ctx, s.MasterName).Result()
	if err != nil {
		return "", err
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("get-master-addr-by-name: got %q, want host and port", hp)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// waitReplicaSynced polls the replica until its link to the master is up.
func (s *Sentinels) waitReplicaSynced(t testing.TB, addr string) {
	t.Helper()
	waitFor(t, addr, sentinelReadyTimeout, func(c *redis.Client) string {
		info, _ := c.Info(context.Background(), "replication").Result()
		return info
	}, "master_link_status:up")
}

// waitSentinelSees polls a sentinel until it lists the replica (healthy) and
// the given number of other sentinels.
func (s *Sentinels) waitSentinelSees(t testing.TB, sentinel, replica string, others int) {
	t.Helper()
	c := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
	defer c.Close()
	_, replicaPort, _ := net.SplitHostPort(replica)
	var state string
	for deadline := time.Now().Add(sentinelReadyTimeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ctx := context.Background()
		replicas, err1 := c.Replicas(ctx, s.MasterName).Result()
		sentinels, err2 := c.Sentinels(ctx, s.MasterName).Result()
		state = fmt.Sprintf("replicas %v (%v), sentinels %d (%v)", replicas, err1, len(sentinels), err2)
		if err1 != nil || err2 != nil || len(sentinels) < others {
			continue
		}
		for _, r := range replicas {
			if r["port"] == replicaPort && r["flags"] == "slave" && r["master-link-status"] == "ok" {
				return
			}
		}
	}
	t.Fatalf("sentinel %s does not see replica %s and %d other sentinels after %v: %s",
		sentinel, replica, others, sentinelReadyTimeout, state)
}
