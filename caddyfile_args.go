package sluice

import (
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// Helpers that read one option's arguments; their errors name the option
// and carry the file and line.

// eachOption calls parse for each option of the block d is at, rejecting
// an option given twice (but repeatable); context starts its errors.
func eachOption(d *caddyfile.Dispenser, context, repeatable string, parse func(option string) error) error {
	seen := make(map[string]bool)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		option := d.Val()
		if seen[option] && option != repeatable {
			return d.Errf("%s%s: specified more than once", context, option)
		}
		seen[option] = true
		if err := parse(option); err != nil {
			return err
		}
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

// perRequestLimit reads `<n>` or `<placeholder> <n>` (events, burst): a
// limit per request, with n the fallback.
func perRequestLimit(d *caddyfile.Dispenser, n *int64, placeholder *string) error {
	option := d.Val()
	args := d.RemainingArgs()
	switch len(args) {
	case 1:
	case 2:
		if !strings.Contains(args[0], "{") {
			return d.Errf("%s: too many values, or %q is not a placeholder (want <n> or <placeholder> <n>)", option, args[0])
		}
		*placeholder, args = args[0], args[1:]
	case 0:
		return d.Errf("%s: missing value", option)
	default:
		return d.Errf("%s: too many values (want <n> or <placeholder> <n>)", option)
	}
	v, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || v < 1 || v > algorithms.MaxEvents {
		return d.Errf("%s: want an integer from 1 to %d, got %q", option, int64(algorithms.MaxEvents), args[0])
	}
	*n = v
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

// quotaLease reads quota_lease: a duration from 1ms to 10s, or off
// (quotaLeaseOff). A zone's window bounds it further, checked with the
// zone (validateQuotaLease).
func quotaLease(d *caddyfile.Dispenser, dst *caddy.Duration) error {
	option := d.Val()
	var val string
	if err := arg(d, &val); err != nil {
		return err
	}
	if val == "off" {
		*dst = quotaLeaseOff
		return nil
	}
	dur, err := caddy.ParseDuration(val)
	if err != nil || dur < algorithms.MinQuotaLease || dur > algorithms.MaxQuotaLease {
		return d.Errf("%s: want a duration from %v to %v, or off, got %q", option, algorithms.MinQuotaLease, algorithms.MaxQuotaLease, val)
	}
	*dst = caddy.Duration(dur)
	return nil
}

func flag(d *caddyfile.Dispenser, dst *bool) error {
	option := d.Val()
	if d.NextArg() {
		return d.Errf("%s: takes no value, got %q", option, d.Val())
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

// statuses reads count_status: one or more codes (100 to 599) or classes
// (1xx to 5xx).
func statuses(d *caddyfile.Dispenser, dst *[]string) error {
	option := d.Val()
	values := d.RemainingArgs()
	if len(values) == 0 {
		return d.Errf("%s: missing value", option)
	}
	if _, err := parseStatuses(values); err != nil {
		return d.Err(err.Error())
	}
	*dst = values
	return nil
}
