package sluice

import (
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// unmarshalShedOption reads a zone's load-shedding options: the adaptive
// block, priority, reserve and status.
func (z *Zone) unmarshalShedOption(d *caddyfile.Dispenser, option string) error {
	switch option {
	case "adaptive":
		if d.NextArg() {
			return d.ArgErr()
		}
		z.Adaptive = new(AdaptiveConfig)
		return eachOption(d, "adaptive: ", "", func(option string) error {
			return z.Adaptive.unmarshalOption(d, option)
		})
	case "priority":
		args := d.RemainingArgs()
		if len(args) < 2 {
			return d.Errf("priority: want a placeholder and its classes, most important first, e.g. {jwt.tier} critical normal bulk")
		}
		z.Priority, z.PriorityClasses = args[0], args[1:]
		if err := z.validatePriority(); err != nil {
			return d.Err(err.Error())
		}
	case "reserve":
		var val string
		if err := arg(d, &val); err != nil {
			return err
		}
		pct, err := strconv.ParseFloat(strings.TrimSuffix(val, "%"), 64)
		if err != nil || pct < 0 || pct > maxReserve*100 {
			return d.Errf("reserve: want a percent from 0%% to %.0f%%, got %q", maxReserve*100, val)
		}
		r := pct / 100
		z.Reserve = &r
	case "status":
		return integer(d, &z.Status, 400, 599)
	}
	return nil
}

func (c *AdaptiveConfig) unmarshalOption(d *caddyfile.Dispenser, option string) error {
	switch option {
	case "min":
		return integer(d, &c.Min, 1, maxAdaptiveEvents)
	case "initial":
		return integer(d, &c.Initial, 1, maxAdaptiveEvents)
	case "tolerance":
		var val string
		if err := arg(d, &val); err != nil {
			return err
		}
		f, err := strconv.ParseFloat(val, 64)
		if err != nil || f <= 1 {
			return d.Errf("adaptive: tolerance: want a ratio above 1 (e.g. 1.5), got %q", val)
		}
		c.Tolerance = f
	default:
		return d.Errf("adaptive: unknown subdirective %q", option)
	}
	return nil
}
