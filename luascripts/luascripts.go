// Package luascripts holds the Redis Lua scripts, one file per algorithm,
// and composes them into the single script that decides a request.
package luascripts

import _ "embed"

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
	//go:embed decide.lua
	decide string
)

// Decide is the script that decides one request over all its zones in one
// atomic call: the shared prelude, every algorithm, then the dispatcher.
var Decide = prelude + fixedWindow + slidingWindow + slidingLog + tokenBucket + concurrency + decide
