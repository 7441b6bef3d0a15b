-- concurrency: leases of requests in flight, a sorted set of lease ids
-- scored by their expiry (now + window), so a lease whose Caddy died
-- expires by itself. Each request takes one lease, whatever its cost.
-- A full key asks for a retry in min(window, 1 s): a slot comes back
-- whenever a response ends, which nothing can foresee.
algorithms.concurrency = {}

function algorithms.concurrency.decide(key, now, events, window, burst, cost, lease)
  local used = redis.call('ZCOUNT', key, '(' .. int(now), '+inf')
  local wait = math.min(window, 1000000)
  -- reset and more are alike: when a slot comes back, nothing foretells
  local reset = 0
  if used >= events then reset = wait end
  if used + 1 > events then
    return false, events - used, wait, reset, reset, 0, 0
  end
  local after = 0
  if used + 1 >= events then after = wait end
  return true, events - used, 0, reset, reset, after, after, now, window, lease
end

-- commit takes the request's lease, until now + window.
function algorithms.concurrency.commit(key, now, window, lease)
  if not lease or lease == '' then error('concurrency: no lease id') end
  -- ZADD first: Redis checks maxmemory at a script's first write
  redis.call('ZADD', key, int(now + window), lease)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now))
  redis.call('PEXPIRE', key, ceil_div(window, 1000))
end

-- settle gives the lease back.
function algorithms.concurrency.settle(key, now, at, events, window, burst, delta, lease)
  if lease and lease ~= '' then redis.call('ZREM', key, lease) end
end
