-- sliding_log: a sorted set of admission times; exact, O(events) memory.
-- A request of cost n adds n members. An entry counts while it is newer than
-- now - window.
algorithms.sliding_log = {}

-- sl_add adds n entries at stamp, named "<stamp>:<seq>" with seq
-- zero-padded, so that the names at one score sort by seq. It goes on from
-- the highest seq at that stamp: requests decided at one now (a batch)
-- never take a name twice, which would count one entry for two.
local function sl_add(key, stamp, n)
  local seq, args = 0, {}
  local top = redis.call('ZREVRANGEBYSCORE', key, stamp, stamp, 'LIMIT', 0, 1)
  if top[1] then seq = tonumber(string.match(top[1], ':(%d+)$')) or 0 end
  for i = 1, n do
    args[#args + 1] = stamp
    args[#args + 1] = stamp .. ':' .. string.format('%08d', seq + i)
    if #args >= 1000 or i == n then
      redis.call('ZADD', key, unpack(args))
      args = {}
    end
  end
end

-- sl_retry is how long until cost more fit, when `used` live entries leave
-- no room: until the entry whose expiry makes room, the
-- (used + cost - events)-th live one, leaves.
local function sl_retry(key, now, since, events, window, used, cost)
  if cost > events then return window end
  local oldest = redis.call('ZRANGEBYSCORE', key, '(' .. int(since), '+inf',
    'WITHSCORES', 'LIMIT', used + cost - events - 1, 1)
  return tonumber(oldest[2]) + window - now
end

function algorithms.sliding_log.decide(key, now, events, window, burst, cost)
  local since = now - window
  local used = redis.call('ZCOUNT', key, '(' .. int(since), '+inf')
  local reset, more, more_after = 0, 0, window
  if used > 0 then
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    reset = math.max(0, tonumber(newest[2]) + window - now)
    -- more quota comes back when the oldest live entry leaves
    local oldest = redis.call('ZRANGEBYSCORE', key, '(' .. int(since), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    more = math.max(0, tonumber(oldest[2]) + window - now)
    more_after = math.min(window, more)
  end
  local remaining = math.max(0, events - used)
  if used + cost <= events then
    return true, remaining, 0, reset, more, window, more_after, now, cost, window
  end
  return false, remaining, sl_retry(key, now, since, events, window, used, cost), reset, more,
    window, more_after
end

-- commit adds cost entries at now and drops those older than the window.
function algorithms.sliding_log.commit(key, now, cost, window)
  -- ZADD first: Redis checks maxmemory at a script's first write, and
  -- ZREMRANGEBYSCORE is not one it refuses
  sl_add(key, int(now), cost)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now - window))
  redis.call('PEXPIRE', key, ceil_div(window, 1000))
end

-- settle removes up to -delta of the entries admitted at `at` (the last
-- named: entries at one stamp are alike), or adds
-- delta entries at `at` (a debt, up to 2 × events live entries), while
-- `at` still counts.
function algorithms.sliding_log.settle(key, now, at, events, window, burst, delta)
  local since, stamp = now - window, int(at)
  if at <= since then return end
  if delta < 0 then
    local added = redis.call('ZREVRANGEBYSCORE', key, stamp, stamp, 'LIMIT', 0, -delta)
    if #added > 0 then redis.call('ZREM', key, unpack(added)) end
    return
  end
  local live = redis.call('ZCOUNT', key, '(' .. int(since), '+inf')
  local n = math.min(delta, math.max(0, 2 * events - live))
  if n > 0 then sl_add(key, stamp, n) end
  if n > 0 and redis.call('PTTL', key) < 0 then
    redis.call('PEXPIRE', key, ceil_div(at + window - now, 1000))
  end
end
