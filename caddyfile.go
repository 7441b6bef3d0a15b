package sluice

import (
	"encoding/json"
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("rate_limit", parseCaddyfile)
	// Before authentication, so that login endpoints are shielded from
	// brute force; `order rate_limit after basic_auth` (or a route block)
	// moves it after, where {http.auth.user.id} is set.
	httpcaddyfile.RegisterDirectiveOrder("rate_limit", httpcaddyfile.Before, "basicauth")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	handler := new(Handler)
	err := handler.UnmarshalCaddyfile(h.Dispenser)
	return handler, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	rate_limit [<matcher>] {
//	    redis {
//	        url          redis://[user:pass@]host:6379/0
//	        addresses    <host:port...>
//	        master_name  <name>
//	        username     <user>
//	        password     <password>
//	        db           <n>
//	        tls          [insecure_skip_verify]
//	        tls_ca       <pem file>
//	        key_prefix   <prefix>
//	        timeout      <duration>
//	        pool_size    <n>
//	    }
//	    failure_mode open|closed
//	    headers      <ietf|legacy|x|none...>
//	    status       <code>
//	    dry_run
//	    log_key
//	    jitter       <fraction>
//	    zone <name> {
//	        match { <request matchers> }
//	        key         <template>
//	        algorithm   fixed_window|sliding_window|sliding_log|token_bucket
//	        events      <n>
//	        window      <duration>
//	        burst       <n>
//	        cost        <n|placeholder>
//	        ipv4_prefix <bits>
//	        ipv6_prefix <bits>
//	        dry_run
//	    }
//	}
//
// mholt/caddy-ratelimit's distributed, storage and sweep_interval are
// accepted and ignored.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := make(map[string]bool)
	for d.NextBlock(0) {
		option := d.Val()
		if seen[option] && option != "zone" {
			return d.Errf("%s: specified more than once", option)
		}
		seen[option] = true
		if err := h.unmarshalOption(d, option); err != nil {
			return err
		}
	}
	return nil
}

func (h *Handler) unmarshalOption(d *caddyfile.Dispenser, option string) error {
	switch option {
	case "zone":
		return h.unmarshalZone(d)
	case "redis":
		h.Redis = new(RedisConfig)
		return h.Redis.unmarshalCaddyfile(d)
	case "failure_mode":
		return oneOf(d, &h.FailureMode, failOpen, failClosed)
	case "headers":
		h.Headers = d.RemainingArgs()
		if len(h.Headers) == 0 {
			return d.ArgErr()
		}
		if _, err := parseHeaderStyles(h.Headers); err != nil {
			return d.Err(err.Error())
		}
	case "status":
		return integer(d, &h.Status, 400, 599)
	case "dry_run":
		return flag(d, &h.DryRun)
	case "log_key":
		return flag(d, &h.LogKey)
	case "jitter":
		return fraction(d, &h.Jitter)
	case "distributed":
		h.Distributed = json.RawMessage(`{}`)
		skip(d)
	case "storage":
		h.Storage = json.RawMessage(`{}`)
		skip(d)
	case "sweep_interval":
		return duration(d, &h.SweepInterval)
	default:
		return d.Errf("unknown subdirective %q", option)
	}
	return nil
}

func (h *Handler) unmarshalZone(d *caddyfile.Dispenser) error {
	var name string
	if err := arg(d, &name); err != nil {
		return err
	}
	if _, dup := h.Zones[name]; dup {
		return d.Errf("zone %s: declared more than once", name)
	}
	z := new(Zone)
	seen := make(map[string]bool)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		option := d.Val()
		if seen[option] {
			return d.Errf("zone %s: %s: specified more than once", name, option)
		}
		seen[option] = true
		if err := z.unmarshalOption(d, option); err != nil {
			return err
		}
	}
	if z.Key == "" || z.MaxEvents == 0 || z.Window == 0 {
		return d.Errf("zone %s: key, events and window are required", name)
	}
	if err := z.checkLimit(name); err != nil {
		return d.Errf("zone %s: %v", name, err)
	}
	if h.Zones == nil {
		h.Zones = make(map[string]*Zone)
	}
	h.Zones[name] = z
	return nil
}

func (z *Zone) unmarshalOption(d *caddyfile.Dispenser, option string) error {
	switch option {
	case "match":
		set, err := caddyhttp.ParseCaddyfileNestedMatcherSet(d)
		if err != nil {
			return err
		}
		z.MatcherSetsRaw = append(z.MatcherSetsRaw, set)
	case "key":
		return arg(d, &z.Key)
	case "algorithm":
		return oneOf(d, &z.Algorithm, string(algorithms.FixedWindow), string(algorithms.SlidingWindow),
			string(algorithms.SlidingLog), string(algorithms.TokenBucket))
	case "events":
		return integer(d, &z.MaxEvents, 1, algorithms.MaxUnits)
	case "window":
		return duration(d, &z.Window)
	case "burst":
		return integer(d, &z.Burst, 1, algorithms.MaxUnits)
	case "cost":
		return arg(d, &z.Cost)
	case "ipv4_prefix":
		return integer(d, &z.IPv4Prefix, 1, 32)
	case "ipv6_prefix":
		return integer(d, &z.IPv6Prefix, 1, 128)
	case "dry_run":
		return flag(d, &z.DryRun)
	default:
		return d.Errf("unknown zone subdirective %q", option)
	}
	return nil
}

// checkLimit runs the checks of provision and validate that need no
// context, so that a Caddyfile error carries the file and line.
func (z *Zone) checkLimit(name string) error {
	probe := *z
	if err := probe.setup(name); err != nil {
		return err
	}
	return probe.validate()
}

func (c *RedisConfig) unmarshalCaddyfile(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := make(map[string]bool)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		option := d.Val()
		if seen[option] {
			return d.Errf("redis: %s: specified more than once", option)
		}
		seen[option] = true
		if err := c.unmarshalOption(d, option); err != nil {
			return err
		}
	}
	if err := c.validate(); err != nil {
		return d.Err(err.Error())
	}
	return nil
}

func (c *RedisConfig) unmarshalOption(d *caddyfile.Dispenser, option string) error {
	switch option {
	case "url":
		return arg(d, &c.URL)
	case "addresses":
		c.Addresses = d.RemainingArgs()
		if len(c.Addresses) == 0 {
			return d.Errf("addresses: missing value")
		}
	case "master_name":
		return arg(d, &c.MasterName)
	case "username":
		return arg(d, &c.Username)
	case "password":
		return arg(d, &c.Password)
	case "db":
		return integer(d, &c.DB, 0, 1<<16)
	case "tls":
		c.TLS = true
		if d.NextArg() {
			if d.Val() != "insecure_skip_verify" || d.NextArg() {
				return d.Errf("tls: want no value or insecure_skip_verify, got %q", d.Val())
			}
			c.InsecureSkipVerify = true
		}
	case "tls_ca":
		return arg(d, &c.TLSCA)
	case "key_prefix":
		return arg(d, &c.KeyPrefix)
	case "timeout":
		return duration(d, &c.Timeout)
	case "pool_size":
		return integer(d, &c.PoolSize, 1, 1<<16)
	default:
		return d.Errf("redis: unknown subdirective %q", option)
	}
	return nil
}

// arg reads the option's single argument.
func arg(d *caddyfile.Dispenser, dst *string) error {
	option := d.Val()
	if !d.NextArg() {
		return d.Errf("%s: missing value", option)
	}
	*dst = d.Val()
	if d.NextArg() {
		return d.Errf("%s: too many values", option)
	}
	return nil
}

func oneOf(d *caddyfile.Dispenser, dst *string, allowed ...string) error {
	option := d.Val()
	var val string
	if err := arg(d, &val); err != nil {
		return err
	}
	for _, a := range allowed {
		if val == a {
			*dst = val
			return nil
		}
	}
	return d.Errf("%s: unknown value %q (want one of %v)", option, val, allowed)
}

func integer[T int | int64](d *caddyfile.Dispenser, dst *T, low, high T) error {
	option := d.Val()
	var val string
	if err := arg(d, &val); err != nil {
		return err
	}
	n, err := strconv.ParseInt(val, 10, 64)
	if err != nil || T(n) < low || T(n) > high {
		return d.Errf("%s: want an integer from %d to %d, got %q", option, low, high, val)
	}
	*dst = T(n)
	return nil
}

func fraction(d *caddyfile.Dispenser, dst *float64) error {
	option := d.Val()
	var val string
	if err := arg(d, &val); err != nil {
		return err
	}
	f, err := strconv.ParseFloat(val, 64)
	if err != nil || f < 0 || f > 1 {
		return d.Errf("%s: want a fraction from 0 to 1, got %q", option, val)
	}
	*dst = f
	return nil
}

func duration(d *caddyfile.Dispenser, dst *caddy.Duration) error {
	option := d.Val()
	var val string
	if err := arg(d, &val); err != nil {
		return err
	}
	dur, err := caddy.ParseDuration(val)
	if err != nil || dur <= 0 {
		return d.Errf("%s: want a positive duration, got %q", option, val)
	}
	*dst = caddy.Duration(dur)
	return nil
}

func flag(d *caddyfile.Dispenser, dst *bool) error {
	if d.NextArg() {
		return d.Errf("%s: takes no value", d.Val())
	}
	*dst = true
	return nil
}

// skip consumes the rest of an ignored option: its arguments and block.
func skip(d *caddyfile.Dispenser) {
	d.RemainingArgs()
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		skip(d)
	}
}
