package sluice

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/internal/envexpand"
)

// Redis defaults, applied in Provision.
const (
	defaultKeyPrefix = "sluice:"
	defaultTimeout   = 100 * time.Millisecond
)

// RedisConfig is where the counters live: one Redis, a Sentinel-managed
// master, or a Cluster.
type RedisConfig struct {
	// URL is redis://[user:pass@]host:6379/0, or rediss:// for TLS.
	URL string `json:"url,omitempty"`

	// Addresses are host:port pairs: several make a Redis Cluster, or with
	// MasterName, the Sentinels to ask.
	Addresses []string `json:"addresses,omitempty"`

	// MasterName is the Sentinel master name.
	MasterName string `json:"master_name,omitempty"`

	// Username and Password authenticate (Redis ACL). {env.REDIS_PASSWORD}
	// works.
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`

	// DB is the database number. Default: 0, or the URL's.
	DB int `json:"db,omitempty"`

	// TLS connects with TLS; InsecureSkipVerify skips checking the server's
	// certificate, and TLSCA names a PEM file of CAs to check it against.
	TLS                bool   `json:"tls,omitempty"`
	InsecureSkipVerify bool   `json:"insecure_skip_verify,omitempty"`
	TLSCA              string `json:"tls_ca,omitempty"`

	// KeyPrefix starts every key Sluice writes; no braces (they would make
	// the Cluster hash tag). Default: "sluice:".
	KeyPrefix string `json:"key_prefix,omitempty"`

	// Timeout bounds each decision, and on Cluster each refund of a denied
	// request's zones. Default: 100ms. A decision is never retried once it
	// may have reached Redis.
	Timeout caddy.Duration `json:"timeout,omitempty"`

	// PoolSize is the most connections per Redis node. Default: go-redis's,
	// 10 per CPU.
	PoolSize int `json:"pool_size,omitempty"`
}

func (c *RedisConfig) validate() error {
	if c.URL == "" && len(c.Addresses) == 0 {
		return fmt.Errorf("redis: url or addresses is required")
	}
	if c.URL != "" && len(c.Addresses) > 0 {
		return fmt.Errorf("redis: url and addresses exclude each other")
	}
	if c.Timeout < 0 || c.DB < 0 || c.PoolSize < 0 {
		return fmt.Errorf("redis: timeout, db and pool_size must not be negative")
	}
	if strings.ContainsAny(c.KeyPrefix, "{}") {
		return fmt.Errorf("redis: key_prefix: no braces, got %q: a {…} in a key is its Cluster hash tag, and would put every key in one slot", c.KeyPrefix)
	}
	return checkURL(c.URL)
}

// checkURL reports a malformed Redis URL. One with a placeholder
// ({env.REDIS_URL}) is checked once it is expanded, at provision.
func checkURL(u string) error {
	if u == "" || strings.Contains(u, "{") {
		return nil
	}
	if _, err := redis.ParseURL(u); err != nil {
		return fmt.Errorf("redis: url: %w", err)
	}
	return nil
}

// setDefaults fills in what the configuration leaves out.
func (c *RedisConfig) setDefaults() {
	if c.KeyPrefix == "" {
		c.KeyPrefix = defaultKeyPrefix
	}
	if c.Timeout == 0 {
		c.Timeout = caddy.Duration(defaultTimeout)
	}
}

// expanded returns c with the {env.*} placeholders in its connection
// settings replaced, and only those: a password may contain other braces.
func (c RedisConfig) expanded() RedisConfig {
	c.URL, c.MasterName = envexpand.Expand(c.URL), envexpand.Expand(c.MasterName)
	c.Username, c.Password = envexpand.Expand(c.Username), envexpand.Expand(c.Password)
	c.Addresses = slices.Clone(c.Addresses)
	for i, a := range c.Addresses {
		c.Addresses[i] = envexpand.Expand(a)
	}
	return c
}

// options translates the configuration, expanded, into go-redis's: a
// URL's settings first, then the explicit fields over them.
func (c *RedisConfig) options() (*redis.UniversalOptions, error) {
	rawURL := c.URL
	e := c.expanded()
	c = &e
	opts := &redis.UniversalOptions{
		Addrs:                 c.Addresses,
		MasterName:            c.MasterName,
		PoolSize:              c.PoolSize,
		ContextTimeoutEnabled: true, // the per-decision deadline bounds I/O
		// One dial per call: go-redis's default (5 dials, 100 ms apart)
		// turns a refused connection into the decision's timeout, paid on
		// every request and counted as cause "timeout"; the breaker is what
		// tries again.
		DialerRetries: 1,
	}
	if c.URL != "" {
		u, err := redis.ParseURL(c.URL)
		if err != nil {
			return nil, fmt.Errorf("url: %w", err)
		}
		opts.Addrs = []string{u.Addr}
		opts.Username, opts.Password, opts.DB, opts.TLSConfig = u.Username, u.Password, u.DB, u.TLSConfig
	}
	if len(opts.Addrs) == 0 && rawURL != "" { // an unset {env.REDIS_URL}
		return nil, fmt.Errorf("url %s is empty: set the environment variable it names", rawURL)
	}
	if len(opts.Addrs) == 0 { // go-redis would take localhost:6379
		return nil, fmt.Errorf("url or addresses is required")
	}
	if c.Username != "" {
		opts.Username = c.Username
	}
	if c.Password != "" {
		opts.Password = c.Password
	}
	if c.DB != 0 {
		opts.DB = c.DB
	}
	if c.TLS || c.InsecureSkipVerify || c.TLSCA != "" {
		tlsConfig, err := c.tlsConfig(opts.TLSConfig)
		if err != nil {
			return nil, err
		}
		opts.TLSConfig = tlsConfig
	}
	return opts, nil
}

func (c *RedisConfig) tlsConfig(base *tls.Config) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if base != nil {
		cfg = base.Clone()
	}
	cfg.InsecureSkipVerify = c.InsecureSkipVerify
	if c.TLSCA != "" {
		pem, err := os.ReadFile(c.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("tls_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls_ca: no PEM certificates in %s", c.TLSCA)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// poolKey identifies the expanded connection settings; handlers that agree
// on them share a client.
func (c *RedisConfig) poolKey() (string, error) {
	conn := c.expanded()
	conn.KeyPrefix, conn.Timeout = "", 0
	b, err := json.Marshal(conn)
	if err != nil {
		return "", fmt.Errorf("encoding redis settings: %w", err)
	}
	return "sluice.redis." + string(b), nil
}

// redisLabel names a Redis in metrics: its Sentinel master name, else its
// configured addresses (host:port, comma-separated); never credentials or
// a key.
func redisLabel(opts *redis.UniversalOptions) string {
	if opts.MasterName != "" {
		return opts.MasterName
	}
	return strings.Join(opts.Addrs, ",")
}
