-- wrk script for bench/run.sh: every request carries an X-Key header drawn
-- at random from 1..BENCH_KEYS (default 1e9), so a rate-limited system sees
-- "many concurrent keys". BENCH_KEYS=1 sends the same key every time (the
-- flood case). Every system is measured with this script, so the client's
-- own cost is the same for all of them.
-- BENCH_KEY_PREFIX goes before the number (a run of its own on fresh keys);
-- BENCH_DELAY_MS, when set, paces each connection: it waits that long
-- after each response before its next request (the lease-fleet scenario's
-- offered rate), where wrk otherwise sends as fast as answers come.
local keys = tonumber(os.getenv("BENCH_KEYS") or "") or 1000000000
local prefix = os.getenv("BENCH_KEY_PREFIX") or ""
local delay_ms = tonumber(os.getenv("BENCH_DELAY_MS") or "") or 0
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
  return wrk.format(nil, nil, { ["X-Key"] = prefix .. tostring(math.random(1, keys)) })
end

if delay_ms > 0 then
  function delay()
    return delay_ms
  end
end
