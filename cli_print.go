package sluice

import (
	"cmp"
	"fmt"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/sluicehq/caddy-sluice/algorithms"
)

// table returns a writer that aligns tab-separated columns on c.out; the
// caller must Flush it.
func (c *adminClient) table() *tabwriter.Writer {
	return tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
}

// printZones prints one line per zone under a header.
func (c *adminClient) printZones(zones []zoneInfo) error {
	if len(zones) == 0 {
		_, err := fmt.Fprintln(c.out, "no zones in force (no rate_limit handler in the config)")
		return err
	}
	tw := c.table()
	fmt.Fprintln(tw, "ZONE\tALGORITHM\tEVENTS\tWINDOW\tBURST\tBACKEND\tHEALTHY\tOPTIONS")
	for _, z := range zones {
		window := formatSeconds(z.Window)
		if z.Adaptive != nil { // in flight at once: no window
			window = "-"
		}
		if z.Period != "" {
			window = z.Period + " (" + cmp.Or(z.TimeZone, "UTC") + ")"
		}
		healthy := "yes"
		if !z.Healthy {
			healthy = "NO"
		}
		burst := "-" // an algorithm without one
		if algorithms.Algorithm(z.Algorithm).Features().Burst {
			burst = strconv.FormatInt(z.Burst, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n",
			z.Name, z.Algorithm, z.Events, window, burst, zoneBackend(z), healthy, zoneOptions(z))
	}
	return tw.Flush()
}

// zoneBackend is e.g. "memory", or "redis (valkey 8.1.1, functions)".
func zoneBackend(z zoneInfo) string {
	var details []string
	if z.Server != "" {
		details = append(details, z.Server)
	}
	if z.Functions != nil {
		details = append(details, map[bool]string{true: "functions", false: "evalsha"}[*z.Functions])
	}
	if len(details) == 0 {
		return z.Backend
	}
	return z.Backend + " (" + strings.Join(details, ", ") + ")"
}

// zoneOptions lists a zone's ban, overrides and quota lease, or "-";
// an adaptive zone's limit, in flight and baseline ("-" until learned).
func zoneOptions(z zoneInfo) string {
	var opts []string
	if a := z.Adaptive; a != nil {
		baseline := "-"
		if a.BaselineSeconds > 0 {
			baseline = formatSeconds(a.BaselineSeconds)
		}
		opts = append(opts, fmt.Sprintf("limit %d", a.Limit), fmt.Sprintf("in flight %d", a.InFlight), "baseline "+baseline)
	}
	if z.Ban > 0 {
		opts = append(opts, "ban "+formatSeconds(z.Ban))
	}
	if z.Overrides {
		opts = append(opts, "overrides")
	}
	if z.QuotaLease > 0 {
		opts = append(opts, "quota_lease "+formatSeconds(z.QuotaLease))
	}
	if len(opts) == 0 {
		return "-"
	}
	return strings.Join(opts, ", ")
}

// printKey prints a key's state, one field a line.
func (c *adminClient) printKey(key string, s keyState) error {
	tw := c.table()
	limit := strconv.FormatInt(s.Limit, 10)
	if s.Override {
		limit += " (override)"
	}
	fmt.Fprintf(tw, "zone\t%s\n", s.Zone)
	fmt.Fprintf(tw, "key\t%s\n", printableKey(key))
	fmt.Fprintf(tw, "limit\t%s\n", limit)
	fmt.Fprintf(tw, "remaining\t%d\n", s.Remaining)
	fmt.Fprintf(tw, "full again in\t%s\n", formatSeconds(float64(s.ResetSeconds)))
	if s.InUse != nil {
		fmt.Fprintf(tw, "in use\t%d\n", *s.InUse)
	}
	if s.Leased > 0 {
		fmt.Fprintf(tw, "leased\t%d\n", s.Leased)
	}
	if s.BannedSeconds != nil {
		banned := "no"
		if *s.BannedSeconds > 0 {
			banned = "for " + formatSeconds(float64(*s.BannedSeconds))
		}
		fmt.Fprintf(tw, "banned\t%s\n", banned)
	}
	return tw.Flush()
}

// printableKey is key as it is, or quoted when it is empty, has spaces at
// an end, or has a character that does not print.
func printableKey(key string) string {
	if key == "" || strings.TrimSpace(key) != key || strings.ContainsFunc(key, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return strconv.Quote(key)
	}
	return key
}

// printTop prints the keys a zone denied most, ranked.
func (c *adminClient) printTop(zone string, top []topKey) error {
	if len(top) == 0 {
		_, err := fmt.Fprintf(c.out, "zone %q denied no key in the last 5 minutes\n", zone)
		return err
	}
	tw := c.table()
	fmt.Fprintln(tw, "RANK\tKEY\tDENIED")
	for i, k := range top {
		fmt.Fprintf(tw, "%d\t%s\t%d\n", i+1, k.Key, k.Denied)
	}
	return tw.Flush()
}

// printOverrides prints a page of a zone's overrides, one a line (the
// KEY column only when the handler shows keys, BURST only on an
// algorithm with one), then how to get the next page; later says the
// page is not the first.
func (c *adminClient) printOverrides(zone string, later bool, list overrideList) error {
	if len(list.Overrides) == 0 && list.Next == "" {
		what := "no key has an override"
		if later {
			what = "no more overrides"
		}
		_, err := fmt.Fprintf(c.out, "zone %q: %s\n", zone, what)
		return err
	}
	var keys, bursts bool
	for _, o := range list.Overrides {
		keys, bursts = keys || o.Key != "", bursts || o.Burst > 0
	}
	tw := c.table()
	header := []string{"HASH"}
	if keys {
		header = append(header, "KEY")
	}
	header = append(header, "EVENTS")
	if bursts {
		header = append(header, "BURST")
	}
	fmt.Fprintln(tw, strings.Join(append(header, "EXPIRES IN"), "\t"))
	for _, o := range list.Overrides {
		row := []string{o.KeyHash}
		if keys {
			key := "-" // set while the handler had no log_key
			if o.Key != "" {
				key = printableKey(o.Key)
			}
			row = append(row, key)
		}
		row = append(row, strconv.FormatInt(o.Events, 10))
		if bursts {
			row = append(row, strconv.FormatInt(o.Burst, 10))
		}
		expires := "never" // until cleared
		if o.ExpiresInSeconds != nil {
			expires = formatSeconds(float64(*o.ExpiresInSeconds))
		}
		fmt.Fprintln(tw, strings.Join(append(row, expires), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if list.Next == "" {
		return nil
	}
	_, err := fmt.Fprintf(c.out, "more: caddy rate-limit overrides %s --after %s\n", shellWord(zone), shellWord(list.Next))
	return err
}

// shellWord is s as one word for a POSIX shell: as it is when it is safe,
// else in single quotes.
func shellWord(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("+/=_.,:@%-", r)))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// formatSeconds prints seconds as a short duration: 1m, 1h30m, 7d, 1.5s.
func formatSeconds(sec float64) string {
	if sec <= 0 || math.IsNaN(sec) {
		return "0s"
	}
	if sec >= float64(math.MaxInt64/int64(time.Second)) {
		return strconv.FormatFloat(sec, 'f', 0, 64) + "s"
	}
	d := time.Duration(math.Round(sec*1e3)) * time.Millisecond
	const day = 24 * time.Hour
	if d >= day && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
