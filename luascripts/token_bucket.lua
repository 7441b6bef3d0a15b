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

-- refund takes `cost` events back out of the bucket, as of the later of
-- `now` and the state's own time, so no drain is counted twice.
function algorithms.token_bucket.refund(key, now, events, window, burst, cost)
  local v = redis.call('GET', key)
  if not v then return end
  local l, t = string.match(v, '^(%d+) (%d+)$')
  l, t = tonumber(l), tonumber(t)
  if not l then return end
  local at = math.max(now, t)
  local elapsed = at - t
  if elapsed >= ceil_div(l, events) then return end
  local level = math.max(0, l - elapsed * events - cost * window)
  save(key, int(level) .. ' ' .. int(at), ceil_div(level, events))
end
