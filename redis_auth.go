package sluice

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// What Redis answers about who Sluice is and what it may do: at provision,
// credentials it refuses (WRONGPASS, NOAUTH) or a command its ACL refuses
// the user (NOPERM, or an ACL DRYRUN that names a missing permission) fail
// the config, naming the option to fix, so `caddy validate` and `caddy
// run` say so instead of a running Caddy whose every request failure_mode
// decides. A Redis that does not answer is no such error: failure_mode
// covers it, and start-up only warns. At run time such errors are their
// own cause, authCause.

// authCause names, in logs and in the error metric's cause label, a call
// Redis refused for its credentials or its ACL.
const authCause = "auth"

// isAuthError reports an error Redis answers for credentials it refuses
// (WRONGPASS, NOAUTH) or a command or key the user may not use (NOPERM), a
// script's call too, which Redis words its own way: Redis 7 and Valkey
// "ERR The user executing the script can't run this command …" (or
// "… can't access at least one of the keys …"), Redis 6 "… -NOPERM …".
func isAuthError(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	for _, word := range authWords {
		if strings.Contains(msg, word) {
			return true
		}
	}
	return false
}

// authWords are what isAuthError looks for.
// "unauthenticated" is Redis's protocol error for a long command from a
// client that has not authenticated.
var authWords = []string{"WRONGPASS", "NOAUTH", "NOPERM", "The user executing the script can't", "ACL failure", "unauthenticated"}

// provisionLookTimeout bounds the first look at the server, made while
// the config is provisioned: a Redis that does not answer within it is
// looked at again in the background (warm), and Caddy starts.
const provisionLookTimeout = 2 * time.Second

// credentials says where a config's Redis credentials come from, to name
// the option that is wrong.
type credentials struct {
	user         string // the user Redis checks: the username, or "default"
	userOption   string // "username", "the url's username", or "" when none is set
	secretOption string // "password", "the url's password", or "" when none is set
}

// credentialsOf says where c's credentials come from (opts are its
// go-redis options).
func credentialsOf(c *RedisConfig, opts *redis.UniversalOptions) credentials {
	cr := credentials{user: opts.Username}
	if cr.user == "" {
		cr.user = "default"
	}
	switch {
	case c.Username != "":
		cr.userOption = "username"
	case opts.Username != "":
		cr.userOption = "the url's username"
	}
	switch {
	case c.Password != "":
		cr.secretOption = "password"
	case opts.Password != "":
		cr.secretOption = "the url's password"
	}
	return cr
}

// authError is the provisioning error for err, an answer of Redis that
// isAuthError reports, naming the option to fix; nil for any other error.
func (cr credentials) authError(err error) error {
	switch {
	case !isAuthError(err):
		return nil
	case strings.Contains(err.Error(), "WRONGPASS"):
		if cr.userOption != "" {
			return fmt.Errorf("redis: %s %q or %s: Redis refused them: %w", cr.userOption, cr.user, orPassword(cr.secretOption), err)
		}
		return fmt.Errorf("redis: %s: Redis refused it: %w", orPassword(cr.secretOption), err)
	case strings.Contains(err.Error(), "NOAUTH"), strings.Contains(err.Error(), "unauthenticated"):
		if cr.secretOption == "" {
			return fmt.Errorf("redis: password: Redis requires one, and none is set: %w", err)
		}
		return fmt.Errorf("redis: %s: Redis did not take it: %w", cr.secretOption, err)
	}
	return cr.permissionError(err.Error())
}

func orPassword(option string) string {
	if option == "" {
		return "password"
	}
	return option
}

// permissionError names the user whose ACL refused what Sluice sends
// (denied), and where the rules it needs are documented.
func (cr credentials) permissionError(denied string) error {
	option := cr.userOption
	if option == "" {
		option = "username"
	}
	return fmt.Errorf("redis: %s %q: Redis's ACL refuses this user commands Sluice sends: %s; "+
		"give it the rules of docs/operations.md, \"A Redis user for Sluice\"", option, cr.user, denied)
}

// aclCommands are the commands Sluice sends to a Redis, as it sends them
// on a key (or channel) of its own, for ACL DRYRUN: decisions and
// settlements (FCALL and FUNCTION LOAD where the server runs Functions,
// else EVALSHA, EVAL and SCRIPT LOAD), what the scripts do to a key's
// state, ban, override and quota lease bookkeeping, the admin API's
// resets and overrides, the top offenders, INFO and PING; on Cluster the
// slot map's. They are docs/operations.md's ACL line but the reset
// channel's PUBLISH and SUBSCRIBE (without them decisions work, and the
// subscription says what is missing: see subscribeResets) and HELLO,
// which the connection that asks has already sent.
func aclCommands(key string, functions, cluster bool) [][]any {
	cmds := [][]any{
		{"get", key}, {"mget", key, key}, {"set", key, "1"}, {"setrange", key, 0, "1"},
		{"del", key}, {"exists", key},
		{"hset", key, "f", "1"}, {"hdel", key, "f"}, {"hmget", key, "f"}, {"hgetall", key},
		{"hincrby", key, "f", 1}, {"hsetnx", key, "f", "1"},
		{"pexpire", key, 1}, {"pttl", key}, {"expireat", key, 1},
		{"multi"}, {"exec"}, {"time"},
		{"zadd", key, 0, "m"}, {"zcount", key, 0, 1}, {"zincrby", key, 1, "m"}, {"zrange", key, 0, 1},
		{"zrangebyscore", key, 0, 1}, {"zrem", key, "m"}, {"zremrangebyscore", key, 0, 1},
		{"zrevrange", key, 0, 1}, {"zrevrangebyscore", key, 1, 0}, {"zscore", key, "m"},
		{"info", "server"}, {"ping"},
	}
	if functions {
		cmds = append(cmds, []any{"fcall", "sluice_check", 1, key}, []any{"function", "load", "replace", "#!lua name=sluice_check"})
	} else {
		cmds = append(cmds, []any{"evalsha", strings.Repeat("0", 40), 1, key}, []any{"eval", "return 1", 1, key}, []any{"script", "load", "return 1"})
	}
	if cluster {
		cmds = append(cmds, []any{"cluster", "slots"}, []any{"cluster", "shards"})
	}
	return cmds
}

// dryRunACL asks Redis, with ACL DRYRUN (Redis 7, Valkey), whether the
// user may run every command Sluice sends (aclCommands) on a key under
// prefix, and returns what it may not, one line per command; none when it
// may, and when the server cannot say (no ACL DRYRUN, or a user without
// the right to ask it, as a least-privileged user is: then every command
// is tried for real, and a refusal is the cause auth at run time).
func dryRunACL(ctx context.Context, client redis.UniversalClient, user, prefix string, functions, cluster bool) ([]string, error) {
	key := prefix + "acl-check"
	if err := client.Do(ctx, "acl", "dryrun", user, "ping").Err(); err != nil {
		if ctx.Err() != nil || !isRedisReply(err) {
			return nil, err
		}
		return nil, nil // NOPERM, no such subcommand (Redis 6), …: it cannot say
	}
	cmds := aclCommands(key, functions, cluster)
	pipe := client.Pipeline()
	results := make([]*redis.Cmd, len(cmds))
	for i, c := range cmds {
		results[i] = pipe.Do(ctx, append([]any{"acl", "dryrun", user}, c...)...)
	}
	if _, err := pipe.Exec(ctx); err != nil && (ctx.Err() != nil || !isRedisReply(err)) {
		return nil, err
	}
	var denied []string
	for i, r := range results {
		reply, err := r.Text()
		if err != nil || reply == "OK" { // an error: a command this server lacks, or arguments it reads otherwise
			continue
		}
		denied = append(denied, fmt.Sprintf("%s: %s", commandName(cmds[i]), reply))
	}
	return denied, nil
}

// commandName is cmd's name as ACL rules spell it: "get", "function|load".
func commandName(cmd []any) string {
	name := fmt.Sprint(cmd[0])
	switch name {
	case "function", "script", "cluster":
		return name + "|" + fmt.Sprint(cmd[1])
	}
	return name
}

// isRedisReply reports whether err is an answer of Redis (an error reply),
// not a failure to reach it.
func isRedisReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}
