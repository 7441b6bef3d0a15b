-- concurrency: slots of requests in flight, a sorted set of slot ids
-- scored by their expiry (now + window), so a slot whose Caddy died
-- expires by itself; a slot is renewed while its request runs (settle
-- with delta > 0). Each request takes one slot, whatever its cost.
-- A slot given back before the call that takes it arrived leaves a
-- tombstone: the same id scored minus the expiry it could have (below 0:
-- never counted), so that call does not take it. Every range of slots
-- starts at 0, every range of tombstones ends below it.
-- A full key asks for a retry in min(window, 1 s): a slot comes back
-- whenever a response ends, which nothing can foresee.
-- in_flight: each request carries its own slot id, so request.lua keeps
-- no parsed request of it.
algorithms.concurrency = {in_flight = true}

function algorithms.concurrency.decide(key, now, events, window, burst, cost, slot)
  local used = rcall('ZCOUNT', key, '(' .. int(now), '+inf')
  local wait = math.min(window, 1000000)
  -- reset and more are alike: when a slot comes back, nothing foretells
  local reset = 0
  if used >= events then reset = wait end
  if used + 1 > events then
    return false, events - used, wait, reset, reset, 0, 0
  end
  local after = 0
  if used + 1 >= events then after = wait end
  return true, events - used, 0, reset, reset, after, after, now, window, slot
end

-- cc_keep makes key live at least window more µs.
local function cc_keep(key, window)
  local ttl = keep_ms(ceil_div(window, 1000))
  if rcall('PTTL', key) < ttl then rcall('PEXPIRE', key, ttl) end
end

-- commit takes the request's slot, until now + window, unless a
-- tombstone says it was given back already; it drops expired slots and
-- tombstones. (Its error's text says lease id for the slot id, as it
-- always has.)
function algorithms.concurrency.commit(key, now, window, slot)
  if not slot or slot == '' then error('concurrency: no lease id') end
  -- ZADD first: Redis checks maxmemory at a script's first write
  rcall('ZADD', key, 'NX', int(now + window), slot)
  rcall('ZREMRANGEBYSCORE', key, 0, int(now))
  rcall('ZREMRANGEBYSCORE', key, int(-now), '(0')
  rcall('PEXPIRE', key, keep_ms(ceil_div(window, 1000)))
end

-- settle renews the slot while it is held (delta > 0), or gives it back
-- (otherwise), leaving a tombstone when it is not there to give back.
function algorithms.concurrency.settle(key, now, at, events, window, burst, delta, slot)
  if not slot or slot == '' then return end
  local score = rcall('ZSCORE', key, slot)
  if score then score = tonum(score) end
  if delta > 0 then
    if score and score > now then
      rcall('ZADD', key, int(now + window), slot)
      cc_keep(key, window)
    end
  elseif score then
    if score > 0 then rcall('ZREM', key, slot) end
  else
    rcall('ZADD', key, int(-(now + window)), slot)
    cc_keep(key, window)
  end
end
