-- decide: a batch of requests' verdicts, in order, each over all its zones
-- atomically; a later request sees what the earlier ones consumed.
-- keys: every request's zone keys, request after request.
-- argv[1]: the number of requests. Then per request: its mode, its now and
-- its zone count, then per zone its ZONE_ARGS arguments.
-- mode: "1" to consume when the request is admitted, "0" to only look,
-- "settle" to settle what a request reserved (see settle_request).
-- now: µs, or "" for Redis TIME (the one clock; read once per call).
-- Per zone: algorithm, events, window (µs), burst, cost, "1" for a dry-run
-- zone (it counts, but its denial admits), the request's lease id
-- (concurrency zones; "" for others) and max_delay (µs; token_bucket
-- only, "0" when unset). An admitting zone's retry is its delay: a
-- reservation's wait (max_delay), else 0.
-- A request is admitted when every enforced zone admits; then every zone
-- that admits consumes, and when it is not, none does.
-- Returns per request: per zone (none for a settlement) allowed (1/0),
-- remaining, retry after (µs), reset (µs: until the quota is whole), more
-- (µs: until a unit of it returns); then the request's now. A request that
-- fails (a Redis error, say WRONGTYPE, or a bad argument) returns one error
-- reply instead, and the batch goes on: one request's failure is not its
-- neighbours'. (Writes it made before failing stay, as with any script.)
local ZONE_ARGS = 8

-- zones and costs are reused by every request of every call (a Function's
-- upvalues live as long as its library): no table per request.
local zones, costs = {}, {}

local function zone_args(argv, a)
  local alg = algorithms[argv[a]]
  if not alg then error('unknown algorithm ' .. tostring(argv[a])) end
  return alg, tonumber(argv[a + 1]), tonumber(argv[a + 2]), tonumber(argv[a + 3]),
    tonumber(argv[a + 4]), argv[a + 5], argv[a + 6], tonumber(argv[a + 7])
end

local function redis_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- settle_request settles n zones (keys[k+1..], argv[a..]) at now: after a
-- response, or when another slot's zone denied the request on Redis
-- Cluster. Per zone the same arguments, with cost = delta (negative: give
-- back; positive: take more) and the dry-run flag = the reservation's time
-- in µs; every key settles on its own.
local function settle_request(keys, k, argv, a, n, now)
  for i = 1, n do
    local alg, events, window, burst, delta, at, lease = zone_args(argv, a + (i - 1) * ZONE_ARGS)
    alg.settle(keys[k + i], now, tonumber(at), events, window, burst, delta, lease)
  end
end

-- decide_request decides one request of n zones (keys[k+1..], argv[a..])
-- at now and appends its verdicts to out.
local function decide_request(keys, k, argv, a, n, now, consume, out)
  local admit = true
  for i = 1, n do
    local alg, events, window, burst, cost, dry_run, lease, max_delay = zone_args(argv, a + (i - 1) * ZONE_ARGS)
    local z = alg.decide(keys[k + i], now, events, window, burst, cost, lease, max_delay)
    zones[i], costs[i] = z, cost
    admit = admit and (z.allowed == true or dry_run == '1')
  end
  local commit = admit and consume
  for i = 1, n do
    local z = zones[i]
    local remaining, reset, more = z.remaining, z.reset, z.more
    if commit and z.allowed then
      z.commit()
      remaining, reset, more = remaining - costs[i], z.reset_after, z.more_after
    end
    out[#out + 1] = z.allowed and 1 or 0
    out[#out + 1] = remaining
    out[#out + 1] = z.retry or 0
    out[#out + 1] = reset
    out[#out + 1] = more
  end
end

-- failed replaces what a failed request appended to out after mark with
-- one error reply: Redis's own (it is already one), or a Lua error's text.
local function failed(out, mark, err)
  for i = #out, mark + 1, -1 do out[i] = nil end
  if type(err) == 'string' then err = {err = 'ERR ' .. err} end
  out[mark + 1] = err
end

local function decide_batch(keys, argv)
  local out, k, a, clock = {}, 0, 2, nil
  for _ = 1, tonumber(argv[1]) do
    local mode, now, n = argv[a], tonumber(argv[a + 1]), tonumber(argv[a + 2])
    a = a + 3
    if not now then
      clock = clock or redis_now()
      now = clock
    end
    local mark, ok, err = #out, nil, nil
    if mode == 'settle' then
      ok, err = pcall(settle_request, keys, k, argv, a, n, now)
    else
      ok, err = pcall(decide_request, keys, k, argv, a, n, now, mode == '1', out)
    end
    if ok then
      out[#out + 1] = now
    else
      failed(out, mark, err)
    end
    k, a = k + n, a + n * ZONE_ARGS
  end
  return out
end
