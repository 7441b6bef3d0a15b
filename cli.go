package sluice

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "rate-limit",
		Usage: "zones | get <zone> <key> | reset <zone> <key> | limit <zone> <key> (<events> [--burst <n>] [--expires <duration>] | --clear) | top <zone> [-n <count>] | overrides <zone> [-n <count>] [--after <next>]",
		Short: "Inspects and resets rate limits of a running Caddy",
		Long: `
Inspects and manages the rate limits of a running Caddy through its admin
API (the rate_limit handler's /rate_limit/ endpoints). On Redis, what it
shows and changes holds for every instance sharing the Redis.

  zones                 the zones in force, with their limits and backend
  get <zone> <key>      a key's state (limit, remaining, reset); consumes nothing
  reset <zone> <key>    starts a key over (and lifts its ban)
  limit <zone> <key> <events> [--burst <n>] [--expires <duration>]
                        sets the key's own limit (a zone with overrides)
  limit <zone> <key> --clear
                        removes it: the zone's limit applies again
  top <zone> [-n <count>]
                        the keys the zone denied most in the last 5 minutes,
                        as their hash unless the handler has log_key
  overrides <zone> [-n <count>] [--after <next>]
                        the keys with their own limit (a zone with overrides),
                        by hash, with the key itself where the handler has
                        log_key; a page of 100 (-n up to 1000), and the
                        --after that shows the next page

<key> is the expanded key, as the zone's key template makes it (e.g. a
client IP, or tenant:api-key); quote it for the shell.

--address is the admin API's address; without it, the admin address of
--config (and --adapter) if given, else localhost:2019, as for 'caddy stop'.

--json prints the admin API's JSON as it comes, for scripts; by default
the output is a table. An unknown zone, a zone without overrides, or an
admin API that does not answer exits with status 1 and says which.
`,
		CobraFunc: rateLimitCommand,
	})
}

// cliHelpTemplate is cobra's help, ending with Sluice's documentation
// instead of Caddy's generic command-line page, which does not know this
// command.
const cliHelpTemplate = `{{with (or .Long .Short)}}{{. | trimTrailingWhitespaces}}

{{end}}{{if or .Runnable .HasSubCommands}}{{.UsageString}}{{end}}
Sluice's documentation of this command and of the admin API it uses:
https://github.com/sluicehq/caddy-sluice/blob/main/docs/operations.md#admin-api
`

// rateLimitCommand sets up `caddy rate-limit` and its verbs on cmd.
func rateLimitCommand(cmd *cobra.Command) {
	cmd.SetHelpTemplate(cliHelpTemplate) // the verbs inherit it
	flags := cmd.PersistentFlags()
	flags.String("address", "", "Admin API address (default localhost:2019, or the admin address of --config)")
	flags.StringP("config", "c", "", "Configuration file whose admin address to use")
	flags.StringP("adapter", "a", "", "Name of the config adapter for --config")
	flags.Bool("json", false, "Print the admin API's JSON as it comes")

	cmd.AddCommand(&cobra.Command{
		Use:   "zones",
		Short: "Lists the zones in force",
		Args:  cobra.NoArgs,
		RunE:  cliVerb(zoneInfos),
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "get <zone> <key>",
		Short: "Shows a key's state, consuming nothing",
		Args:  cobra.ExactArgs(2),
		RunE:  cliVerb(cliGet),
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "reset <zone> <key>",
		Short: "Starts a key over, and lifts its ban",
		Args:  cobra.ExactArgs(2),
		RunE:  cliVerb(cliReset),
	})
	limit := &cobra.Command{
		Use:   "limit <zone> <key> (<events> [--burst <n>] [--expires <duration>] | --clear)",
		Short: "Sets or clears a key's own limit, in a zone with overrides",
		Args:  cobra.RangeArgs(2, 3),
		RunE:  cliVerb(cliLimit),
	}
	limit.Flags().Int64("burst", 0, "Token bucket capacity for the key (default: its events)")
	limit.Flags().String("expires", "", "How long the key's limit lasts, e.g. 24h or 7d (default: until cleared)")
	limit.Flags().Bool("clear", false, "Remove the key's limit: the zone's applies again")
	cmd.AddCommand(limit)
	top := &cobra.Command{
		Use:   "top <zone> [-n <count>]",
		Short: "Lists the keys the zone denied most in the last 5 minutes",
		Args:  cobra.ExactArgs(1),
		RunE:  cliVerb(cliTop),
	}
	top.Flags().IntP("count", "n", 10, "How many keys to list")
	cmd.AddCommand(top)
	overrides := &cobra.Command{
		Use:   "overrides <zone> [-n <count>] [--after <next>]",
		Short: "Lists the keys with their own limit, in a zone with overrides",
		Args:  cobra.ExactArgs(1),
		RunE:  cliVerb(cliOverrides),
	}
	overrides.Flags().IntP("count", "n", defaultOverridesN, fmt.Sprintf("How many overrides to list, at most %d", maxOverridesN))
	overrides.Flags().String("after", "", "Where the page starts: the next of the previous page")
	cmd.AddCommand(overrides)
}

// cliVerb makes a verb a cobra RunE through caddycmd's wrapper, so that
// errors are logged and exit codes set as for Caddy's own commands.
func cliVerb(verb func(c *adminClient, fl caddycmd.Flags, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		return caddycmd.WrapCommandFuncForCobra(func(fl caddycmd.Flags) (int, error) {
			c, err := newAdminClient(fl, cmd.OutOrStdout())
			if err != nil {
				return caddy.ExitCodeFailedStartup, err
			}
			if err := verb(c, fl, args); err != nil {
				return caddy.ExitCodeFailedStartup, err
			}
			return caddy.ExitCodeSuccess, nil
		})(cmd, args)
	}
}

// keyPath is the admin path of a zone's key: each is one path segment,
// percent-escaped (a / in a key is %2F).
func keyPath(zone, key string) string {
	return "/rate_limit/zones/" + pathSegment(zone) + "/keys/" + pathSegment(key)
}

// pathSegment escapes s as one path segment. A segment of "." or ".." is
// escaped too (%2E), or the admin API's mux would clean it away and
// redirect; it unescapes %2E as it does %2F.
func pathSegment(s string) string {
	if s == "." || s == ".." {
		return strings.ReplaceAll(s, ".", "%2E")
	}
	return url.PathEscape(s)
}

func zoneInfos(c *adminClient, _ caddycmd.Flags, _ []string) error {
	body, err := c.do(http.MethodGet, "/rate_limit/zones", nil)
	if err != nil {
		return fmt.Errorf("listing zones: %w", err)
	}
	var zones []zoneInfo
	if err := decode(body, &zones); err != nil {
		return fmt.Errorf("listing zones: %w", err)
	}
	if c.json {
		return c.raw(body)
	}
	return c.printZones(zones)
}

func cliGet(c *adminClient, _ caddycmd.Flags, args []string) error {
	zone, key := args[0], args[1]
	body, err := c.do(http.MethodGet, keyPath(zone, key), nil)
	if err != nil {
		return fmt.Errorf("reading key %q of zone %q: %w", key, zone, err)
	}
	var state keyState
	if err := decode(body, &state); err != nil {
		return fmt.Errorf("reading key %q of zone %q: %w", key, zone, err)
	}
	if c.json {
		return c.raw(body)
	}
	return c.printKey(key, state)
}

func cliReset(c *adminClient, _ caddycmd.Flags, args []string) error {
	zone, key := args[0], args[1]
	body, err := c.do(http.MethodDelete, keyPath(zone, key), nil)
	if err != nil {
		return fmt.Errorf("resetting key %q of zone %q: %w", key, zone, err)
	}
	return c.changed(body, fmt.Sprintf("key %q of zone %q starts over", key, zone), "resetting key %q of zone %q", key, zone)
}

// changed reports a change of a key (a reset, a limit set or cleared) the
// admin API answered with body: empty (204) when every instance was told,
// else its warning (resetAnswer) that they could not be, printed after
// done; what and args name the change in an error.
func (c *adminClient) changed(body []byte, done, what string, args ...any) error {
	if len(body) == 0 {
		return c.say("%s\n", done)
	}
	var answer resetAnswer
	if err := decode(body, &answer); err != nil || !answer.Reset {
		return fmt.Errorf(what+": the admin API answered %q, not a change made", append(args, body)...)
	}
	if c.json {
		return c.raw(body)
	}
	if err := c.say("%s\n", done); err != nil {
		return err
	}
	return c.say("warning: %s\n", answer.Warning)
}

func cliLimit(c *adminClient, fl caddycmd.Flags, args []string) error {
	zone, key := args[0], args[1]
	if key == "" {
		// …/keys//limit: the admin API's mux would clean the empty segment away.
		return errors.New("limit: the empty key has no limit path in the admin API; set the zone's own limit instead")
	}
	path := keyPath(zone, key) + "/limit"
	if fl.Bool("clear") {
		if len(args) != 2 || fl.Changed("burst") || fl.Changed("expires") {
			return errors.New("limit --clear takes a zone and a key only: no events, --burst or --expires")
		}
		body, err := c.do(http.MethodDelete, path, nil)
		if err != nil {
			return fmt.Errorf("clearing the limit of key %q in zone %q: %w", key, zone, err)
		}
		return c.changed(body, fmt.Sprintf("key %q of zone %q has the zone's limit again", key, zone), "clearing the limit of key %q in zone %q", key, zone)
	}
	req, err := parseOverride(fl, args)
	if err != nil {
		return err
	}
	body, err := c.do(http.MethodPut, path, req)
	if err != nil {
		return fmt.Errorf("setting the limit of key %q in zone %q: %w", key, zone, err)
	}
	msg := fmt.Sprintf("key %q of zone %q is limited to %d events", key, zone, *req.Events)
	if req.Burst > 0 {
		msg += fmt.Sprintf(" (burst %d)", req.Burst)
	}
	if req.ExpiresIn != "" {
		msg += " for " + fl.String("expires")
	}
	return c.changed(body, msg, "setting the limit of key %q in zone %q", key, zone)
}

// parseOverride checks limit's arguments and flags and builds its request.
func parseOverride(fl caddycmd.Flags, args []string) (overrideBody, error) {
	if len(args) != 3 {
		return overrideBody{}, errors.New("limit takes a zone, a key and events (or --clear)")
	}
	events, err := strconv.ParseInt(args[2], 10, 64)
	if err != nil || events < 1 || events > maxCLIEvents {
		return overrideBody{}, fmt.Errorf("events %q: want a whole number from 1 to %d", args[2], maxCLIEvents)
	}
	req := overrideBody{Events: &events}
	if fl.Changed("burst") {
		burst, _ := fl.GetInt64("burst")
		if burst < 1 || burst > maxCLIEvents {
			return overrideBody{}, fmt.Errorf("--burst %d: want a whole number from 1 to %d", burst, maxCLIEvents)
		}
		req.Burst = burst
	}
	if s := fl.String("expires"); s != "" {
		d, err := caddy.ParseDuration(s)
		if err != nil || d <= 0 || d > maxOverrideExpiry {
			return overrideBody{}, fmt.Errorf("--expires %q: want a positive duration up to 366d, such as 24h or 7d", s)
		}
		req.ExpiresIn = d.String() // Go syntax, which every duration parser reads
	}
	return req, nil
}

// maxCLIEvents is the largest events (and burst) a zone accepts.
const maxCLIEvents = 1_000_000_000

func cliTop(c *adminClient, fl caddycmd.Flags, args []string) error {
	zone := args[0]
	n, _ := fl.GetInt("count")
	if n < 1 {
		return fmt.Errorf("-n %d: want at least 1", n)
	}
	body, err := c.do(http.MethodGet, "/rate_limit/zones/"+pathSegment(zone)+"/top?n="+strconv.Itoa(n), nil)
	if err != nil {
		return fmt.Errorf("listing the top denied keys of zone %q: %w", zone, err)
	}
	var top []topKey
	if err := decode(body, &top); err != nil {
		return fmt.Errorf("listing the top denied keys of zone %q: %w", zone, err)
	}
	if c.json {
		return c.raw(body)
	}
	return c.printTop(zone, top)
}

func cliOverrides(c *adminClient, fl caddycmd.Flags, args []string) error {
	zone := args[0]
	n, _ := fl.GetInt("count")
	if n < 1 || n > maxOverridesN {
		return fmt.Errorf("-n %d: want a whole number from 1 to %d", n, maxOverridesN)
	}
	query := "?n=" + strconv.Itoa(n)
	after := fl.String("after")
	if after != "" {
		query += "&after=" + url.QueryEscape(after)
	}
	body, err := c.do(http.MethodGet, "/rate_limit/zones/"+pathSegment(zone)+"/overrides"+query, nil)
	if err != nil {
		return fmt.Errorf("listing the overrides of zone %q: %w", zone, err)
	}
	var list overrideList
	if err := decode(body, &list); err != nil {
		return fmt.Errorf("listing the overrides of zone %q: %w", zone, err)
	}
	if c.json {
		return c.raw(body)
	}
	return c.printOverrides(zone, after != "", list)
}
