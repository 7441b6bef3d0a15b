-- Shared by every algorithm. Time is integer microseconds; every number
-- below stays an integer under 2^53, so Lua's doubles hold it exactly.
local algorithms = {}

local function ceil_div(a, b)
  return math.floor((a + b - 1) / b)
end

-- int formats an integer without Lua's %.14g rounding.
local function int(n)
  return string.format('%d', n)
end

-- save stores a one-string state that lives ttl microseconds.
local function save(key, state, ttl)
  redis.call('SET', key, state, 'PX', math.max(1, ceil_div(ttl, 1000)))
end
