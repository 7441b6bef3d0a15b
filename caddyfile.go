package sluice

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/jwtclaims"
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
//	    failure_mode open|closed|local
//	    headers      <ietf|legacy|x|pk|none...>
//	    status       <code>
//	    problem_details
//	    dry_run
//	    log_key
//	    jitter       <fraction>
//	    quota_lease  <duration> | off
//	    disable_metrics
//	    jwt {
//	        from     header <name> | cookie <name> | query <name>
//	        secret   <hmac secret>
//	        public_key <pem file>
//	        jwks_url <url>
//	        jwks_refresh <duration>
//	        issuer   <iss>
//	        audience <aud>
//	        insecure_skip_verify
//	    }
//	    zone <name> {
//	        match { <request matchers> }
//	        key         <template>
//	        algorithm   <a name of algorithms/table.go>
//	        events      <n>
//	        window      <duration>
//	        burst       <n>
//	        cost        <n|placeholder>
//	        count_status <code|1xx..5xx ...>
//	        cost_from_response <placeholder>
//	        max_delay   <duration>
//	        ipv4_prefix <bits>
//	        ipv6_prefix <bits>
//	        overrides
//	        ban         <duration>
//	        quota_lease <duration> | off
//	        dry_run
//	        adaptive {
//	            min       <n>
//	            initial   <n>
//	            tolerance <ratio>
//	        }
//	        priority    <placeholder> <class...>
//	        reserve     <percent>
//	        status      <code>
//	    }
//	}
//
// mholt/caddy-ratelimit's distributed, storage and sweep_interval are
// accepted and ignored; its disable_metrics is Sluice's too.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()        // the directive name
	directive := *d // its line, for errors about the whole directive
	if d.NextArg() {
		return d.ArgErr()
	}
	lines := make(map[string]optionLines) // each zone's options, for errors found after its block
	if err := eachOption(d, "", "zone", func(option string) error {
		if option == "zone" {
			return h.unmarshalZone(d, lines)
		}
		return h.unmarshalOption(d, option)
	}); err != nil {
		return err
	}
	if len(h.Zones) == 0 { // Validate says so too, for JSON, without a line
		return directive.Errf("at least one zone is required")
	}
	// the jwt block may follow the zones that name its claims
	for _, name := range slices.Sorted(maps.Keys(h.Zones)) {
		if err := h.Zones[name].checkClaims(h.JWT != nil); err != nil {
			return lines[name].errorAt(directive, name, err)
		}
	}
	return nil
}

// optionLines are where a zone's options are, by name, so that an error
// found once the whole zone is known (validation, a {jwt.*} without a jwt
// block) names the line of the option it is about.
type optionLines map[string]caddyfile.Dispenser

// errorAt is err of zone name at the line of the option err starts with
// ("burst: ..."), or of the option of that option's block it names next
// ("adaptive: min: ..."), else at fallback's line (the zone's end).
func (at optionLines) errorAt(fallback caddyfile.Dispenser, name string, err error) error {
	msg := err.Error()
	if option, rest, ok := strings.Cut(msg, ":"); ok {
		if d, ok := at[option]; ok {
			fallback = d
			if sub, _, ok := strings.Cut(strings.TrimSpace(rest), ":"); ok {
				if d, ok := blockOption(d, sub); ok {
					fallback = d
				}
			}
		}
	}
	return fallback.Errf("zone %s: %s", name, msg)
}

// blockOption is d, at an option, moved to the option named sub in that
// option's block; ok false when it has no block or none of that name.
func blockOption(d caddyfile.Dispenser, sub string) (caddyfile.Dispenser, bool) {
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		if d.Val() == sub {
			return d, true
		}
		d.RemainingArgs()
	}
	return d, false
}

func (h *Handler) unmarshalOption(d *caddyfile.Dispenser, option string) error {
	switch option {
	case "redis":
		h.Redis = new(RedisConfig)
		return h.Redis.unmarshalCaddyfile(d)
	case "jwt":
		h.JWT = new(jwtclaims.Config)
		return unmarshalJWT(d, h.JWT)
	case "failure_mode":
		return oneOf(d, &h.FailureMode, failOpen, failClosed, failLocal)
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
	case "problem_details":
		return flag(d, &h.ProblemDetails)
	case "dry_run":
		return flag(d, &h.DryRun)
	case "log_key":
		return flag(d, &h.LogKey)
	case "jitter":
		return fraction(d, &h.Jitter)
	case "quota_lease":
		return quotaLease(d, &h.QuotaLease)
	case "disable_metrics":
		return flag(d, &h.DisableMetrics)
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

// missingOptions names the required options z lacks: key, events, and
// window or period where its algorithm has no default window.
func (z *Zone) missingOptions() []string {
	var missing []string
	if z.Key == "" {
		missing = append(missing, "key")
	}
	if z.MaxEvents == 0 {
		missing = append(missing, "events")
	}
	if z.Window == 0 && z.Period == "" && algorithms.Algorithm(z.Algorithm).Features().DefaultWindow == 0 && !z.isAdaptive() {
		missing = append(missing, "window")
	}
	return missing
}

// unmarshalZone reads a zone block, noting in lines where its options are.
func (h *Handler) unmarshalZone(d *caddyfile.Dispenser, lines map[string]optionLines) error {
	var name string
	if err := arg(d, &name); err != nil {
		return err
	}
	if _, dup := h.Zones[name]; dup {
		return d.Errf("zone %s: declared more than once", name)
	}
	z, at := new(Zone), make(optionLines)
	if err := eachOption(d, "zone "+name+": ", "", func(option string) error {
		at[option] = *d
		return z.unmarshalOption(d, option)
	}); err != nil {
		return err
	}
	lines[name] = at
	if missing := z.missingOptions(); len(missing) > 0 {
		return d.Errf("zone %s: %s missing (key, events and window (or period) are required)", name, strings.Join(missing, ", "))
	}
	if err := z.checkLimit(name); err != nil {
		return at.errorAt(*d, name, err)
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
		return oneOf(d, &z.Algorithm, append(algorithms.Names(), algorithmAdaptive)...)
	case "events":
		return perRequestLimit(d, &z.MaxEvents, &z.EventsPlaceholder)
	case "window":
		return duration(d, &z.Window)
	case "period":
		return oneOf(d, &z.Period, "day", "week", "month", "year")
	case "time_zone":
		if err := arg(d, &z.TimeZone); err != nil {
			return err
		}
		if _, err := algorithms.LoadTimeZone(z.TimeZone); err != nil {
			return d.Err(err.Error())
		}
	case "burst":
		return perRequestLimit(d, &z.Burst, &z.BurstPlaceholder)
	case "cost":
		return arg(d, &z.Cost)
	case "max_delay":
		return duration(d, &z.MaxDelay)
	case "ipv4_prefix": // 0: the whole address, as mholt/caddy-ratelimit reads it
		return integer(d, &z.IPv4Prefix, 0, 32)
	case "ipv6_prefix":
		return integer(d, &z.IPv6Prefix, 0, 128)
	case "dry_run":
		return flag(d, &z.DryRun)
	case "overrides":
		return flag(d, &z.Overrides)
	case "ban":
		if err := duration(d, &z.Ban); err != nil {
			return err
		}
		if err := validateBan(time.Duration(z.Ban)); err != nil {
			return d.Err(err.Error())
		}
	case "quota_lease":
		return quotaLease(d, &z.QuotaLease)
	case "count_status":
		return statuses(d, &z.CountStatus)
	case "cost_from_response":
		return arg(d, &z.CostFromResponse)
	case "adaptive", "priority", "reserve", "status":
		return z.unmarshalShedOption(d, option)
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
	block := *d // the redis line, for errors about the whole block
	if d.NextArg() {
		return d.ArgErr()
	}
	if err := eachOption(d, "redis: ", "", func(option string) error {
		return c.unmarshalOption(d, option)
	}); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return block.Err(err.Error())
	}
	return nil
}

func (c *RedisConfig) unmarshalOption(d *caddyfile.Dispenser, option string) error {
	switch option {
	case "url":
		if err := arg(d, &c.URL); err != nil {
			return err
		}
		if err := checkURL(c.URL); err != nil {
			return d.Err(err.Error())
		}
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
		if err := arg(d, &c.KeyPrefix); err != nil {
			return err
		}
		if strings.ContainsAny(c.KeyPrefix, "{}") {
			return d.Errf("key_prefix: no braces, got %q: a {…} in a key is its Cluster hash tag", c.KeyPrefix)
		}
	case "timeout":
		return duration(d, &c.Timeout)
	case "pool_size":
		return integer(d, &c.PoolSize, 1, 1<<16)
	default:
		return d.Errf("redis: unknown subdirective %q", option)
	}
	return nil
}

func unmarshalJWT(d *caddyfile.Dispenser, c *jwtclaims.Config) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	if err := eachOption(d, "jwt: ", "", func(option string) error {
		return unmarshalJWTOption(d, c, option)
	}); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return d.Err(err.Error())
	}
	return nil
}

func unmarshalJWTOption(d *caddyfile.Dispenser, c *jwtclaims.Config, option string) error {
	switch option {
	case "from":
		args := d.RemainingArgs()
		if len(args) != 2 {
			return d.Errf("jwt: from: want header, cookie or query and a name")
		}
		switch args[0] {
		case "header":
			c.FromHeader = args[1]
		case "cookie":
			c.FromCookie = args[1]
		case "query":
			c.FromQuery = args[1]
		default:
			return d.Errf("jwt: from: want header, cookie or query, got %q", args[0])
		}
	case "secret":
		return arg(d, &c.Secret)
	case "public_key":
		return arg(d, &c.PublicKey)
	case "jwks_url":
		return arg(d, &c.JWKSURL)
	case "jwks_refresh":
		return duration(d, &c.JWKSRefresh)
	case "issuer":
		return arg(d, &c.Issuer)
	case "audience":
		return arg(d, &c.Audience)
	case "insecure_skip_verify":
		return flag(d, &c.InsecureSkipVerify)
	default:
		return d.Errf("jwt: unknown subdirective %q", option)
	}
	return nil
}
