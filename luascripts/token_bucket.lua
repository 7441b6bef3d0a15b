-- token_bucket, GCRA-style: one event is `window` units and the bucket
-- drains `events` units per microsecond, so a capacity of burst*window holds
-- `burst` events and every quantity is an exact integer.
-- State: "<units used> <time they were counted>", kept until drained.
algorithms.token_bucket = {}

function algorithms.token_bucket.decide(key, now, events, window, burst, cost)
  local level = 0
  local v = redis.call('GET', key)
  if v then
    local l, t = string.match(v, '^(%d+) (%d+)$')
    l, t = tonumber(l), tonumber(t)
    if l then
      local elapsed = math.max(0, now - t)
      if elapsed < ceil_div(l, events) then level = l - elapsed * events end
    end
  end
  local capacity, need = burst * window, cost * window
  local z = {
    remaining = math.floor((capacity - level) / window),
    reset = ceil_div(level, events),
    reset_after = ceil_div(level + need, events),
  }
  if level + need <= capacity then
    z.allowed = true
    z.commit = function() save(key, int(level + need) .. ' ' .. int(now), z.reset_after) end
  elseif need > capacity then
    z.retry = window
  else
    z.retry = ceil_div(level + need - capacity, events)
  end
  return z
end

-- settle takes `delta` events out of (negative) or into (positive) the
-- bucket, as of the later of `now` and the state's own time, so no drain
-- is counted twice. Above capacity the level is a debt that later requests
-- wait out, bounded by 2 × capacity.
function algorithms.token_bucket.settle(key, now, at, events, window, burst, delta)
  local t, level = now, 0
  local v = redis.call('GET', key)
  if v then
    local l, lt = string.match(v, '^(%d+) (%d+)$')
    l, lt = tonumber(l), tonumber(lt)
    if l then
      t = math.max(now, lt)
      if t - lt < ceil_div(l, events) then level = l - (t - lt) * events end
    end
  end
  delta = math.min(math.max(delta, -2 * burst), 2 * burst) -- exact products below
  level = math.min(math.max(0, level + delta * window), 2 * burst * window)
  save(key, int(level) .. ' ' .. int(t), ceil_div(level, events))
end
