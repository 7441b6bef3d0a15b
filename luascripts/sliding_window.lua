-- sliding_window: the weighted two-window counter. The previous window's
-- count is weighed by the share of it the sliding window still overlaps:
-- used = cur + floor(prev * (window - elapsed) / window), exactly (mul_div:
-- prev * window passes 2^53 at 10^5 a day).
-- State: the window start, the count in it and the count in the previous
-- window as three little-endian doubles (struct '<ddd', 24 bytes), kept
-- until the next window ends. Earlier releases stored them as text at a
-- key without the ":v2" suffix (see fixed_window.lua).

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

-- sw_load is the stored window start and the counts in it and in the one
-- before, or nil for none.
local function sw_load(key)
  local v = redis.call('GET', key)
  if v and #v == 24 then return struct.unpack('<ddd', v) end
  return nil
end

-- sw_retry is how long until cost more fit, when they do not now.
local function sw_retry(start, now, events, window, cur, prev, cost)
  if cost > events then return window end
  local e = fits_from(events, window, cur, prev, cost)
  if e then return start + e - now end
  return start + window + fits_from(events, window, 0, cur, cost) - now
end

function algorithms.sliding_window.decide(key, now, events, window, burst, cost)
  local start, cur, prev = now - now % window, 0, 0
  local s, c, p = sw_load(key)
  if s and c then
    if s >= start then
      start, cur, prev = s, c, p
    elseif s == start - window then
      prev = c
    end
  end
  local elapsed = math.max(0, now - start)
  local weighted = 0
  if prev > 0 then weighted = mul_div(prev, window - elapsed, window) end
  local used = cur + weighted
  local reset_after = start + 2 * window - now
  local reset = 0
  if cur > 0 then
    reset = reset_after
  elseif prev > 0 then
    reset = start + window - now
  end
  local more = sliding_more(start, now, window, cur, prev, weighted)
  local more_after = sliding_more(start, now, window, cur + cost, prev, weighted)
  local remaining = math.max(0, events - used)
  if used + cost <= events then
    -- a window already counted keeps the expiry its first write set
    local ttl = reset_after
    if cur > 0 then ttl = false end
    return true, remaining, 0, reset, more, reset_after, more_after, start, cur + cost, prev, ttl
  end
  return false, remaining, sw_retry(start, now, events, window, cur, prev, cost), reset, more,
    reset_after, more_after
end

-- commit stores the new counts, kept until the next window ends: for ttl
-- µs, or (ttl false) as long as the window's first write set. SET KEEPTTL
-- costs Redis half of SET PX, which takes the old expiry out of its table
-- and puts the new one in.
function algorithms.sliding_window.commit(key, start, cur, prev, ttl)
  if ttl then
    save(key, struct.pack('<ddd', start, cur, prev), ttl)
  else
    redis.call('SET', key, struct.pack('<ddd', start, cur, prev), 'KEEPTTL')
  end
end

-- settle changes the count of the reservation's window by `delta`: the
-- current count, or the previous one if the window has moved on since;
-- a debt is at most one more limit.
function algorithms.sliding_window.settle(key, now, at, events, window, burst, delta)
  local s, c, p = sw_load(key)
  if not (s and c) then return end
  local start = at - at % window
  if s == start then
    c = math.min(math.max(0, c + delta), 2 * events)
  elseif s == start + window then
    p = math.min(math.max(0, p + delta), 2 * events)
  else
    return
  end
  redis.call('SET', key, struct.pack('<ddd', s, c, p), 'KEEPTTL')
end
