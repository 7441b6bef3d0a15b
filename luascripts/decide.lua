-- decide: one request's verdict over all its zones, atomically.
-- KEYS[i]: zone i's key.
-- ARGV[1]: now in µs, or "" to read Redis TIME (the one clock).
-- ARGV[2]: "1" to consume when the request is admitted, "0" to only look.
-- ARGV[3..]: per zone: algorithm, events, window (µs), burst, cost, and
-- "1" for a dry-run zone (it counts, but its denial admits).
-- The request is admitted when every enforced zone admits; then every zone
-- that admits consumes, and when it is not, none does.
-- Returns per zone: allowed (1/0), remaining, retry after (µs), reset (µs).
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local zones, admit = {}, true
for i, key in ipairs(KEYS) do
  local a = 3 + (i - 1) * 6
  local decide = algorithms[ARGV[a]]
  if not decide then return redis.error_reply('unknown algorithm ' .. ARGV[a]) end
  local z = decide(key, now, tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]),
    tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]))
  z.cost = tonumber(ARGV[a + 4])
  zones[i] = z
  admit = admit and (z.allowed == true or ARGV[a + 5] == '1')
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
return out
