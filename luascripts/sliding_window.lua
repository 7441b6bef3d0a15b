-- sliding_window: the weighted two-window counter. The previous window's
-- count is weighed by the share of it the sliding window still overlaps:
-- used = cur + floor(prev * (window - elapsed) / window), exactly (mul_div:
-- prev * window passes 2^53 at 10^5 a day).
-- State: "<window start> <count in it> <count in the previous window>",
-- kept until the next window ends.

-- weight_below is the first time e into a window at which the previous
-- window's prev weigh at most k < prev:
-- floor(prev*(window-e)/window) <= k  <=>  e >= window - ceil((k+1)*window/prev) + 1
local function weight_below(window, prev, k)
  return window - ceil_mul_div(k + 1, window, prev) + 1
end

-- fits_from is how far into a window `cost` more fit, given `cur` counted in
-- it and `prev` in the one before; nil if they never fit in it.
local function fits_from(events, window, cur, prev, cost)
  local room = events - cur - cost
  if room < 0 then return nil end
  if prev <= room then return 0 end
  return weight_below(window, prev, room)
end

-- sliding_more is how long until used drops by a unit: when the previous
-- window's weighted count does, or else 1 µs into the next window, when the
-- current count starts to weigh less; 0 when nothing is used.
local function sliding_more(start, now, window, cur, prev, weighted)
  if weighted > 0 then return start + weight_below(window, prev, weighted - 1) - now end
  if cur > 0 then return start + window + 1 - now end
  return 0
end

algorithms.sliding_window = {}

function algorithms.sliding_window.decide(key, now, events, window, burst, cost)
  local start, cur, prev = now - now % window, 0, 0
  local v = redis.call('GET', key)
  if v then
    local s, c, p = string.match(v, '^(%d+) (%d+) (%d+)$')
    s, c, p = tonumber(s), tonumber(c), tonumber(p)
    if s and s >= start then
      start, cur, prev = s, c, p
    elseif s == start - window then
      prev = c
    end
  end
  local elapsed = math.max(0, now - start)
  local weighted = mul_div(prev, window - elapsed, window)
  local used = cur + weighted
  local z = {remaining = math.max(0, events - used), reset_after = start + 2 * window - now}
  if cur > 0 then
    z.reset = z.reset_after
  elseif prev > 0 then
    z.reset = start + window - now
  else
    z.reset = 0
  end
  z.more = sliding_more(start, now, window, cur, prev, weighted)
  z.more_after = sliding_more(start, now, window, cur + cost, prev, weighted)
  if used + cost <= events then
    z.allowed = true
    z.commit = function() save(key, int(start) .. ' ' .. int(cur + cost) .. ' ' .. int(prev), z.reset_after) end
  elseif cost > events then
    z.retry = window
  else
    local e = fits_from(events, window, cur, prev, cost)
    if e then
      z.retry = start + e - now
    else
      z.retry = start + window + fits_from(events, window, 0, cur, cost) - now
    end
  end
  return z
end

-- settle changes the count of the reservation's window by `delta`: the
-- current count, or the previous one if the window has moved on since;
-- a debt is at most one more limit.
function algorithms.sliding_window.settle(key, now, at, events, window, burst, delta)
  local v = redis.call('GET', key)
  if not v then return end
  local s, c, p = string.match(v, '^(%d+) (%d+) (%d+)$')
  s, c, p = tonumber(s), tonumber(c), tonumber(p)
  local start = at - at % window
  if s == start then
    c = math.min(math.max(0, c + delta), 2 * events)
  elseif s == start + window then
    p = math.min(math.max(0, p + delta), 2 * events)
  else
    return
  end
  redis.call('SET', key, int(s) .. ' ' .. int(c) .. ' ' .. int(p), 'KEEPTTL')
end
