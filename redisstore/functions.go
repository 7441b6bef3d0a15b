package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/caddy-sluice/algorithms"
	"github.com/sluicehq/caddy-sluice/luascripts"
)

// code is the decide code of every algorithm of the table, each its
// entry's Lua.
var code = composeCode()

// composeCode composes the decide code of the table's algorithms. A table
// entry naming a script this build lacks is a broken build, found at
// start (by any test of this package), never on a request.
func composeCode() luascripts.Code {
	specs := algorithms.Specs()
	algs := make([]luascripts.Algorithm, len(specs))
	for i, s := range specs {
		takenAtEnd, atEnd := s.LeaseFlags()
		algs[i] = luascripts.Algorithm{Name: string(s.Name), File: s.Lua, Leases: s.Leases, TakenAtEnd: takenAtEnd, AtEnd: atEnd}
	}
	c, err := luascripts.Compose(algs)
	if err != nil {
		panic(err)
	}
	return c
}

// decideScript is the EVALSHA fallback, with EVAL on NOSCRIPT, so a
// restarted Redis (empty script cache) recovers by itself.
var decideScript = redis.NewScript(code.Decide)

// decideHash is decideScript's SHA1, which EVALSHA sends.
var decideHash = decideScript.Hash()

// call is one FCALL (or EVALSHA) of the decide code: keys and args in, the
// reply (a string of every request's values, or a string or error reply
// per request) or the error out.
type call struct {
	keys  []string
	args  []string
	reply any
	err   error
}

// runner runs decide calls on one client: as Redis 7 Functions (the
// library loaded once per server, FCALL per call) until a server answers
// that it has no FUNCTION or FCALL (Redis 6.2, some Redis-compatible
// servers); from then on, for this client, as EVALSHA. A call is retried
// only when Redis answered that nothing ran: once when the code is missing
// (Function not found after a restart or FUNCTION FLUSH; NOSCRIPT), and
// within its deadline while its Cluster slot moves (redirect.go). A call
// that failed any other way may have run, and is never replayed.
type runner struct {
	client  redis.UniversalClient
	scripts atomic.Bool // true once FUNCTION is known to be missing
	// slotRetries is the retry budget of a call whose slot moves (0:
	// slotRetryBudget); tests set a longer one.
	slotRetries time.Duration
}

// Functions reports whether the store's decisions run as a Redis Function
// (FCALL); false means EVALSHA (a server without Functions, such as Redis
// 6, or Options.Scripts). Known once Warm or a first call has run.
func (s *Store) Functions() bool { return !s.runner.scripts.Load() }

// load loads the library on every server that decides: each master of a
// Cluster, else the one server the client talks to. REPLACE makes it
// idempotent; the name is versioned, so no other release's code is
// replaced. It reports whether Functions are available.
func (r *runner) load(ctx context.Context) (bool, error) {
	var err error
	if cluster, ok := r.client.(*redis.ClusterClient); ok {
		err = cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.FunctionLoadReplace(ctx, code.Library).Err()
		})
	} else {
		err = r.client.FunctionLoadReplace(ctx, code.Library).Err()
	}
	if noFunctions(err) {
		r.scripts.Store(true)
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("loading redis function library %s: %w", code.LibraryName, err)
	}
	return true, nil
}

// warm loads what calls will run: the library, or the script.
func (r *runner) warm(ctx context.Context) error {
	if !r.scripts.Load() {
		ok, err := r.load(ctx)
		if err != nil || ok {
			return err
		}
	}
	return decideScript.Load(ctx, r.client).Err()
}

// runOnce runs calls, in one round trip: one command, or a pipeline of
// them (on Cluster go-redis sends each to its slot's node). Calls that
// found the code missing are loaded and run once more.
func (r *runner) runOnce(ctx context.Context, calls []*call) {
	scripts := r.scripts.Load()
	r.send(ctx, calls, scripts, false)
	retry := missing(calls, scripts)
	if len(retry) == 0 {
		return
	}
	if !scripts {
		ok, err := r.load(ctx)
		if err != nil {
			for _, c := range retry {
				c.err = err
			}
			return
		}
		scripts = !ok
	}
	// after NOSCRIPT (or a switch to scripts), EVAL carries the source
	r.send(ctx, retry, scripts, scripts)
}

// missing returns the calls whose error says that the code they ran is not
// on the server: safe to run again.
func missing(calls []*call, scripts bool) []*call {
	var out []*call
	for _, c := range calls {
		if c.err == nil { // HasErrorPrefix allocates even for nil
			continue
		}
		if (scripts && redis.HasErrorPrefix(c.err, "NOSCRIPT")) || (!scripts && noFunction(c.err)) {
			out = append(out, c)
		}
	}
	return out
}

// noFunction reports an error that means the library is not loaded, or
// that the server has no Functions at all.
func noFunction(err error) bool {
	return redis.HasErrorPrefix(err, "Function not found") || noFunctions(err)
}

// noFunctions reports a server without FUNCTION or FCALL: an unknown
// command (Redis 6.2; a command renamed away) or subcommand.
func noFunctions(err error) bool {
	return redis.HasErrorPrefix(err, "unknown command") || redis.HasErrorPrefix(err, "unknown subcommand")
}

// send runs calls as FCALL, EVALSHA or (eval) EVAL and stores each reply.
// None is replayed after a failure that may have reached Redis: a call
// consumes or refunds, and a second run would do it twice (go-redis
// retries a command after a connection error by default; noRetryCmd tells
// it not to, but still to retry one that never reached the wire). Cluster
// redirections (MOVED, ASK) are followed: Redis ran nothing then either;
// those that outlast go-redis's are sent again by run (redirect.go).
func (r *runner) send(ctx context.Context, calls []*call, scripts, eval bool) {
	issue := func(k *call) noRetryCmd {
		switch {
		case !scripts:
			return scriptCmd(ctx, "fcall", &code.FunctionName, k.keys, k.args)
		case eval:
			return scriptCmd(ctx, "eval", &code.Decide, k.keys, k.args)
		default:
			return scriptCmd(ctx, "evalsha", &decideHash, k.keys, k.args)
		}
	}
	if len(calls) == 1 {
		cmd := issue(calls[0])
		_ = r.client.Process(ctx, cmd)
		calls[0].reply, calls[0].err = cmd.Result()
		return
	}
	cmds := make([]noRetryCmd, len(calls))
	pipe := r.client.Pipeline()
	for i, c := range calls {
		cmds[i] = issue(c)
		_ = pipe.Process(ctx, cmds[i])
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for i, c := range calls {
		c.reply, c.err = cmds[i].Result()
	}
}

// scriptCmd is the command name (FCALL, EVAL or EVALSHA) running script
// (its name, source or hash) on keys and args. script, each key and each
// arg go as pointers to their strings, which go-redis reads as the
// strings: an interface holding a string would cost an allocation for
// each (name is a constant: it costs none). keys and args must not change
// while the command lives.
func scriptCmd(ctx context.Context, name any, script *string, keys, args []string) noRetryCmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, name, script, len(keys))
	for i := range keys {
		cmdArgs = append(cmdArgs, &keys[i])
	}
	for i := range args {
		cmdArgs = append(cmdArgs, &args[i])
	}
	cmd := redis.NewCmd(ctx, cmdArgs...)
	cmd.SetFirstKeyPos(3) // for Cluster's slot routing, as go-redis's own Eval does
	return noRetryCmd{cmd}
}

// noRetryCmd is a command go-redis must not send twice: after an error it
// retries it only if it never reached the wire.
type noRetryCmd struct{ *redis.Cmd }

func (noRetryCmd) NoRetry() bool { return true }

func (c noRetryCmd) Clone() redis.Cmder {
	if clone, ok := c.Cmd.Clone().(*redis.Cmd); ok {
		return noRetryCmd{clone}
	}
	return c.Cmd.Clone()
}

// DescribeServer readies the server for decisions (Warm), which tells
// Functions from EVALSHA, and reads its name and version (INFO server).
func (s *Store) DescribeServer(ctx context.Context) (algorithms.ServerDescription, error) {
	if err := s.Warm(ctx); err != nil {
		return algorithms.ServerDescription{}, err
	}
	reply, err := s.client.Info(ctx, "server").Result()
	if err != nil {
		return algorithms.ServerDescription{}, fmt.Errorf("INFO server: %w", err)
	}
	return algorithms.ServerDescription{Server: serverName(reply), Functions: s.Functions()}, nil
}

// serverName reads "<name> <version>" from an INFO server reply: Valkey
// says server_name:valkey and valkey_version (its redis_version is the
// Redis version it is compatible with); Redis says only redis_version.
func serverName(info string) string {
	fields := map[string]string{}
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	name := fields["server_name"]
	if name == "" {
		name = "redis"
	}
	version := fields[name+"_version"]
	if version == "" {
		version = fields["redis_version"]
	}
	if version == "" {
		return name
	}
	return name + " " + version
}
