// Package luascripts holds the Redis Lua scripts, one file per algorithm,
// and composes them into the code that decides a batch of requests: a Redis
// 7 Function library (loaded once per server, then FCALL) and the same code
// as a script for EVALSHA, where FUNCTION is missing.
package luascripts

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
)

var (
	//go:embed prelude.lua
	prelude string
	//go:embed fixed_window.lua
	fixedWindow string
	//go:embed sliding_window.lua
	slidingWindow string
	//go:embed sliding_log.lua
	slidingLog string
	//go:embed token_bucket.lua
	tokenBucket string
	//go:embed concurrency.lua
	concurrency string
	//go:embed request.lua
	request string
	//go:embed decide.lua
	decide string
)

// body is the shared prelude, every algorithm, the reading of a request's
// string, then the dispatcher, which defines decide_batch(keys, argv).
var body = prelude + fixedWindow + slidingWindow + slidingLog + tokenBucket + concurrency + request + decide

// Decide is the script that decides a batch of requests in one atomic call
// (EVAL/EVALSHA): it defines everything, then runs decide_batch.
var Decide = body + "\nreturn decide_batch(KEYS, ARGV)\n"

// version names this code: the first 12 hex digits of its SHA-1. A library
// named by its content is never overwritten by another release's code on
// the same Redis (two releases side by side during a rollout each load
// their own), and any change to a script is a new name with no bump to
// forget.
var version = func() string {
	sum := sha1.Sum([]byte(body))
	return hex.EncodeToString(sum[:6])
}()

// LibraryName is the Function library's name, versioned (see version).
var LibraryName = "sluice_" + version

// FunctionName is the Function that decides a batch (FCALL FunctionName
// numkeys keys... args...), with Decide's keys, arguments and reply.
// Function names are global across libraries, so it carries the version too.
var FunctionName = LibraryName + "_decide"

// Library is the source for FUNCTION LOAD: the algorithms and the
// dispatcher are defined once at load; each FCALL runs only decide_batch.
var Library = "#!lua name=" + LibraryName + "\n" + body +
	"\nredis.register_function('" + FunctionName + "', decide_batch)\n"
