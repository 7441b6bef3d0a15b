-- Shared by every algorithm. Time is integer microseconds; every number
-- below stays an integer under 2^53, so Lua's doubles hold it exactly.
-- A product that can pass 2^53 (events × window reaches 2^75) goes
-- through mul_div.
local algorithms = {}

-- The library functions every decision calls, as upvalues: a global's
-- field costs two table lookups per use. A Function's library cannot
-- reach them while it loads, so the first call sets them (decide_batch).
local rcall, spack, sunpack, floor, tonum

-- max_time caps every duration reported or stored (2^52 µs, about 142
-- years): a token bucket of 10^9 refilled once a year takes longer to drain.
local max_time = 2 ^ 52

-- floor(a / b) of doubles is exact for integers 0 <= a < 2^53 - 1, b >= 1.
local function ceil_div(a, b)
  return floor((a + b - 1) / b)
end

-- mul_div is floor(a * b / c) and a * b mod c, exactly, for integers
-- a, b >= 0 and 0 < c < 2^52 (algorithms/memory_algorithms.go's mulDiv is its twin).
-- Below 2^53 - 1 the product is exact; above it, binary long multiplication
-- modulo c keeps every value below 2c. The quotient is exact below 2^53;
-- above it only its size is used (callers cap it at max_time).
local function mul_div(a, b, c)
  local p = a * b
  if p < 2 ^ 53 - 1 then
    local q = floor(p / c)
    return q, p - q * c
  end
  if a < b then a, b = b, a end
  local qa = floor(a / c)
  local ra = a - qa * c
  local q, r, bit = 0, 0, 1
  while bit * 2 <= b do bit = bit * 2 end
  while bit >= 1 do
    q, r = q * 2, r * 2
    if r >= c then q, r = q + 1, r - c end
    if b >= bit then
      b = b - bit
      q, r = q + qa, r + ra
      if r >= c then q, r = q + 1, r - c end
    end
    bit = bit / 2
  end
  return q, r
end

-- ceil_mul_div is ceil(a * b / c), exactly below 2^53.
local function ceil_mul_div(a, b, c)
  local q, r = mul_div(a, b, c)
  if r > 0 then q = q + 1 end
  return q
end

-- num is tonumber(s), remembered: the same few limits and window starts
-- recur in every call (a Function's upvalues outlive its calls), and Lua's
-- tonumber (strtod) of a 13-digit number costs about eight times a table
-- lookup. The memory is bounded: it starts over past memo_max entries.
local memo, memo_n, memo_max = {}, 0, 4096

-- settled is a count of n changed by a settlement's delta: never below 0,
-- and a debt (delta > 0) takes it no higher than 2 × events
-- (algorithms.MaxDebtFactor) or n, whichever is more. A refund is never
-- capped: a settlement made under a smaller limit than the count's (a
-- per-request limit, a lease's give-back under its zone's own limit) must
-- not lower it below what was admitted (algorithms.settledCount is the
-- twin).
local function settled(n, delta, events)
  if delta > 0 then return math.min(n + delta, math.max(n, 2 * events)) end
  return math.max(0, n + delta)
end

local function num(s)
  local v = memo[s]
  if v then return v end
  v = tonum(s)
  if v then
    if memo_n >= memo_max then memo, memo_n = {}, 0 end
    memo[s], memo_n = v, memo_n + 1
  end
  return v
end

-- int formats an integer without Lua's %.14g rounding.
local function int(n)
  return string.format('%d', n)
end

-- time_now is the request's now when it is Redis's (TIME), else nil: a
-- caller's now (a test's, a replay's) may lie anywhere.
local time_now

-- remember stores v at the number k of memo t, a table of what recurs (a
-- window's end, a key's first state), and returns v. t starts over past
-- 1,024 entries, so its memory stays bounded whatever the keys; its count
-- is its field n.
local function remember(t, k, v)
  local n = t.n or 0
  if n >= 1024 then
    for old in pairs(t) do t[old] = nil end
    n = 0
  end
  t[k], t.n = v, n + 1
  return v
end

-- pxat says whether SET takes PXAT and GET (Redis 6.2 and later; only
-- 7.0 and later tell their version to scripts). until_text remembers the
-- PXAT arguments save_until made, by the end (µs) each was made for: a
-- window's or a slot's end recurs for every key of it.
local pxat, until_text = nil, {}

-- px_text remembers save's PX arguments by their milliseconds: Redis
-- formats a number argument with printf's %.17g, dearer than a table
-- lookup (and than int's %d on a miss); a fresh key's ttl, and a full
-- bucket's, recur.
local px_text = {}

-- caller_keep is what every expiry gets added (ms) when the caller gave
-- now (a test's or a replay's clock, which stands still between its steps
-- while Redis's runs on): Redis expires keys on its own clock, and a
-- state it dropped early would read as a fresh one. Every state read
-- after its end decides as a missing one would (its times are in it).
local caller_keep = 60000

-- keep_ms is the expiry (ms) of a key that must live ms more on the
-- request's clock: ms on Redis's, ms + caller_keep on a caller's.
local function keep_ms(ms)
  if time_now then return ms end
  return ms + caller_keep
end

-- save stores a one-string state that lives ttl microseconds.
local function save(key, state, ttl)
  local ms = ceil_div(ttl, 1000)
  if ms < 1 then ms = 1 end
  ms = keep_ms(ms)
  rcall('SET', key, state, 'PX', px_text[ms] or remember(px_text, ms, int(ms)))
end

-- save_until is save for a state that lives until a window's or a slot's
-- end (ttl >= 1 µs from now): on Redis's clock, as the absolute end
-- (PXAT), whose argument recurs for every key of that window and is
-- formatted once. SET PX's milliseconds differ from key to key, and Redis
-- rewrites it into PXAT for its replicas besides.
local function save_until(key, state, ttl)
  if pxat == nil then pxat = (tonum(redis.REDIS_VERSION_NUM) or 0) >= 0x060200 end
  if not (pxat and time_now) then return save(key, state, ttl) end
  local u = time_now + ttl
  local a = until_text[u]
  if not a then
    local at = u + 999
    at = (at - at % 1000) / 1000 -- rounded up, after now's millisecond (ttl >= 1)
    a = remember(until_text, u, int(at))
  end
  -- GET: a fresh key's reply is then nil, which costs Redis less to hand to
  -- Lua than SET's "OK" (a table)
  rcall('SET', key, state, 'PXAT', a, 'GET')
end
