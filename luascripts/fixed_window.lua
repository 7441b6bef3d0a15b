-- fixed_window: a counter per window. Windows are aligned to the epoch of
-- Redis TIME, so every Caddy node agrees where one starts.
-- State: "<window start> <count>", expiring when the window ends.
algorithms.fixed_window = {}

function algorithms.fixed_window.decide(key, now, events, window, burst, cost)
  local start, count = now - now % window, 0
  local v = redis.call('GET', key)
  if v then
    local s, n = string.match(v, '^(%d+) (%d+)$')
    s, n = tonumber(s), tonumber(n)
    if s and s >= start then start, count = s, n end
  end
  local reset = start + window - now
  -- everything comes back at the window's end
  local z = {remaining = events - count, reset = reset, reset_after = reset,
    more = count > 0 and reset or 0, more_after = reset}
  if count + cost <= events then
    z.allowed = true
    z.commit = function() save(key, int(start) .. ' ' .. int(count + cost), reset) end
  else
    z.retry = reset
  end
  return z
end

-- settle changes the reservation's count by `delta` (negative: a refund;
-- positive: a debt, at most one more limit), while the reservation's
-- window (the one `at` fell in) is still the stored one.
function algorithms.fixed_window.settle(key, now, at, events, window, burst, delta)
  local v = redis.call('GET', key)
  if not v then return end
  local s, n = string.match(v, '^(%d+) (%d+)$')
  s, n = tonumber(s), tonumber(n)
  if s and s == at - at % window then
    local count = math.min(math.max(0, n + delta), 2 * events)
    redis.call('SET', key, int(s) .. ' ' .. int(count), 'KEEPTTL')
  end
end
