-- decide: one request's verdict over all its zones, atomically.
-- KEYS[i]: zone i's key.
-- ARGV[1]: now in µs, or "" to read Redis TIME (the one clock).
-- ARGV[2]: "1" to consume when the request is admitted, "0" to only look,
-- "settle" to settle admitted requests (see below).
-- ARGV[3..]: per zone: algorithm, events, window (µs), burst, cost,
-- "1" for a dry-run zone (it counts, but its denial admits), and the
-- request's lease id (concurrency zones; "" for others).
-- The request is admitted when every enforced zone admits; then every zone
-- that admits consumes, and when it is not, none does.
-- Returns per zone: allowed (1/0), remaining, retry after (µs), reset (µs);
-- then now.
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function zone_args(i)
  local a = 3 + (i - 1) * 7
  local alg = algorithms[ARGV[a]]
  if not alg then error('unknown algorithm ' .. tostring(ARGV[a])) end
  return alg, tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]),
    tonumber(ARGV[a + 4]), ARGV[a + 5], ARGV[a + 6]
end

-- mode "settle" (begin): after a response, or when another slot's zone
-- denied the request on Redis Cluster. Per key the same seven arguments,
-- with cost = delta (negative: give back; positive: take more) and the
-- dry-run flag = the reservation's time in µs; every key settles on its own.
if ARGV[2] == 'settle' then
  for i, key in ipairs(KEYS) do
    local alg, events, window, burst, delta, at, lease = zone_args(i)
    alg.settle(key, now, tonumber(at), events, window, burst, delta, lease)
  end
  return {}
end
-- mode "settle" (end)

local zones, admit = {}, true
for i, key in ipairs(KEYS) do
  local alg, events, window, burst, cost, dry_run, lease = zone_args(i)
  dry_run = dry_run == '1'
  local z = alg.decide(key, now, events, window, burst, cost, lease)
  z.cost = cost
  zones[i] = z
  admit = admit and (z.allowed == true or dry_run)
end

local commit = admit and ARGV[2] == '1'
local out = {}
for _, z in ipairs(zones) do
  local remaining, reset = z.remaining, z.reset
  if commit and z.allowed then
    z.commit()
    remaining, reset = remaining - z.cost, z.reset_after
  end
  out[#out + 1] = z.allowed and 1 or 0
  out[#out + 1] = remaining
  out[#out + 1] = z.retry or 0
  out[#out + 1] = reset
end
out[#out + 1] = now
return out
