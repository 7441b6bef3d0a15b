-- wrk script for bench/run.sh: every request carries an X-Key header drawn
-- at random from 1..BENCH_KEYS (default 1e9), so a rate-limited system sees
-- "many concurrent keys". BENCH_KEYS=1 sends the same key every time (the
-- flood case). Every system is measured with this script, so the client's
-- own cost is the same for all of them.
local keys = tonumber(os.getenv("BENCH_KEYS") or "") or 1000000000
local threads = 0

function setup(thread)
  threads = threads + 1
  thread:set("thread_id", threads)
end

function init(args)
  -- each thread its own sequence (a fresh Lua state per thread)
  math.randomseed(os.time() * 1000 + (thread_id or 0) * 7919)
end

function request()
  return wrk.format(nil, nil, { ["X-Key"] = tostring(math.random(1, keys)) })
end
