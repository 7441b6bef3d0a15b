package redistest

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of masters without replicas, each a Server.
type Cluster struct {
	Servers []*Server
}

// StartCluster starts n redis-servers in cluster mode and joins them with
// redis-cli --cluster create, then waits until every node reports the
// cluster ok.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{}
	for range n {
		c.Servers = append(c.Servers, Start(t, "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(CLI(t), args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, s := range c.Servers {
		waitClusterOK(t, s.Addr)
	}
	return c
}

// Addrs are the masters' addresses.
func (c *Cluster) Addrs() []string { return addrsOf(c.Servers) }

// Client returns a cluster client, closed at the test's end.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = client.Close() })
	return client
}

func waitClusterOK(t testing.TB, addr string) {
	t.Helper()
	waitFor(t, addr, 20*time.Second, func(c *redis.Client) string {
		info, _ := c.ClusterInfo(context.Background()).Result()
		return info
	}, "cluster_state:ok")
}
