-- decide: one request's verdict over all its zones, atomically.
-- KEYS[i]: zone i's key.
-- ARGV[1]: now in µs, or "" to read Redis TIME (the one clock).
-- ARGV[2]: "1" to consume when the request is admitted, "0" to only look,
-- "refund" to take back what a call at ARGV[1] consumed (Redis Cluster,
-- when another slot's zone denied the request).
-- ARGV[3..]: per zone: algorithm, events, window (µs), burst, cost, and
-- "1" for a dry-run zone (it counts, but its denial admits).
-- The request is admitted when every enforced zone admits; then every zone
-- that admits consumes, and when it is not, none does.
-- Returns per zone: allowed (1/0), remaining, retry after (µs), reset (µs:
-- until the quota is whole), more (µs: until a unit of it returns); then now.
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function zone_args(i)
  local a = 3 + (i - 1) * 6
  local alg = algorithms[ARGV[a]]
  if not alg then error('unknown algorithm ' .. tostring(ARGV[a])) end
  return alg, tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]),
    tonumber(ARGV[a + 4]), ARGV[a + 5] == '1'
end

if ARGV[2] == 'refund' then
  for i, key in ipairs(KEYS) do
    local alg, events, window, burst, cost = zone_args(i)
    alg.refund(key, now, events, window, burst, cost)
  end
  return {}
end

local zones, admit = {}, true
for i, key in ipairs(KEYS) do
  local alg, events, window, burst, cost, dry_run = zone_args(i)
  local z = alg.decide(key, now, events, window, burst, cost)
  z.cost = cost
  zones[i] = z
  admit = admit and (z.allowed == true or dry_run)
end

local commit = admit and ARGV[2] == '1'
local out = {}
for _, z in ipairs(zones) do
  local remaining, reset, more = z.remaining, z.reset, z.more
  if commit and z.allowed then
    z.commit()
    remaining, reset, more = remaining - z.cost, z.reset_after, z.more_after
  end
  out[#out + 1] = z.allowed and 1 or 0
  out[#out + 1] = remaining
  out[#out + 1] = z.retry or 0
  out[#out + 1] = reset
  out[#out + 1] = more
end
out[#out + 1] = now
return out
