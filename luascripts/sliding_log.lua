-- sliding_log: the requests of the window, exact, in a sorted set scored
-- by time (µs): one member "<time>:<units>" per time, whatever the cost (a
-- batch's requests share a time and one member), and the member "#"
-- scored -1 - (the units of every member), so that the units in the
-- window are read without walking the members. Every time member has a
-- score >= 0 and "#" one <= -1: ranges of times start above -1. An entry
-- counts while it is newer than now - window. algorithms/sliding_log.go
-- is the twin; the key ends with StateSuffix ":v4" (the first release
-- kept one member per unit at keys without a suffix).
algorithms.sliding_log = {}

-- sl_units is the units of a time member "<time>:<units>", sl_stamp its
-- time.
local function sl_units(member)
  return tonum(string.sub(member, string.find(member, ':', 1, true) + 1))
end

local function sl_stamp(member)
  return tonum(string.sub(member, 1, string.find(member, ':', 1, true) - 1))
end

-- sl_used is the units of key's entries newer than since: the total less
-- the expired entries not yet dropped (the next change drops them).
local function sl_used(key, since)
  local total = rcall('ZSCORE', key, '#')
  if not total then return 0 end
  local used = -1 - tonum(total)
  if since >= 0 then
    local gone = rcall('ZRANGEBYSCORE', key, '(-1', int(since))
    for i = 1, #gone do used = used - sl_units(gone[i]) end
  end
  return used
end

-- sl_after is the range bound of the live entries: newer than since,
-- never "#".
local function sl_after(since)
  return '(' .. int(math.max(since, -1))
end

-- sl_walk is how many entries a refusal reads, at most, for its exact
-- Retry-After: a batch of 64 refusals reads at most 4,096 whatever the
-- log. algorithms/sliding_log.go's SlidingLogWalk is its twin and says why
-- 64.
local sl_walk = 64

-- sl_retry is how long until cost more fit, when `used` live units leave
-- no room: until the live entry whose leaving frees the
-- (used + cost - events)-th unit leaves, which is also the newest entry
-- whose units and those after it pass the units that may stay. It walks
-- from whichever end has fewer units to cross, in growing pages that each
-- start past the last entry read (no offset to skip), only as far as it
-- needs and at most sl_walk entries; when the entry lies further, it
-- answers when every live entry has left (newest is the newest live
-- entry's time): never earlier than a retry can pass.
local function sl_retry(key, now, since, events, window, used, cost, newest)
  if cost > events then return window end
  local free = used + cost - events
  local keep = used - free
  local newest_first = keep < free
  local read, page, seen, from = 0, 16, 0, nil
  while read < sl_walk do
    local es
    if newest_first then
      es = rcall('ZREVRANGEBYSCORE', key, from or '+inf', sl_after(since), 'LIMIT', 0, page)
    else
      es = rcall('ZRANGEBYSCORE', key, from or sl_after(since), '+inf', 'LIMIT', 0, page)
    end
    for i = 1, #es do
      seen = seen + sl_units(es[i])
      if (newest_first and seen > keep) or (not newest_first and seen >= free) then
        return sl_stamp(es[i]) + window - now
      end
    end
    if #es < page then error('sliding_log: ' .. key .. ' holds fewer units than its total') end
    read, from = read + page, '(' .. int(sl_stamp(es[#es])) -- one entry per time
    page = math.min(page * 2, sl_walk - read)
  end
  return newest + window - now
end

function algorithms.sliding_log.decide(key, now, events, window, burst, cost)
  local since = now - window
  local used = sl_used(key, since)
  local reset, more, more_after, newest = 0, 0, window, now
  if used > 0 then
    newest = tonum(rcall('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
    reset = math.max(0, newest + window - now)
    -- more quota comes back when the oldest live entry leaves
    local oldest = rcall('ZRANGEBYSCORE', key, sl_after(since), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    more = math.max(0, tonum(oldest[2]) + window - now)
    more_after = math.min(window, more)
  end
  local remaining = math.max(0, events - used)
  if used + cost <= events then
    -- whole again once the newest entry leaves: a quota lease's, stamped
    -- with its end, may be newer than this request
    return true, remaining, 0, reset, more, math.max(window, reset), more_after, now, cost, window, used
  end
  return false, remaining, sl_retry(key, now, since, events, window, used, cost, newest),
    reset, more, window, more_after
end

-- sl_add adds n units (n < 0: takes them) at stamp, to a key whose live
-- units are used (newer than since), and drops the expired entries. The
-- first write is a ZADD: Redis checks maxmemory at a script's first
-- write, and refuses ZADD but not ZREM.
local function sl_add(key, stamp, n, used, since)
  local old = rcall('ZRANGEBYSCORE', key, stamp, stamp)[1]
  local have = 0
  if old then have = sl_units(old) end
  rcall('ZADD', key, -1 - (used + n), '#')
  if have + n > 0 then rcall('ZADD', key, stamp, stamp .. ':' .. (have + n)) end
  if old then rcall('ZREM', key, old) end
  if since >= 0 then rcall('ZREMRANGEBYSCORE', key, '(-1', int(since)) end
end

-- sl_keep keeps key at least ttl µs more: a quota lease's entry, stamped
-- with its end, may need the log longer than a window from now.
local function sl_keep(key, ttl)
  local ms = keep_ms(ceil_div(ttl, 1000))
  if rcall('PTTL', key) < ms then rcall('PEXPIRE', key, ms) end
end

-- commit adds cost units at now; used is decide's live units.
function algorithms.sliding_log.commit(key, now, cost, window, used)
  sl_add(key, int(now), cost, used, now - window)
  sl_keep(key, window)
end

-- settle takes up to -delta units from the entry at `at` (a refund), or
-- adds delta units at `at` (a debt, up to 2 × events live units), while
-- `at` still counts.
function algorithms.sliding_log.settle(key, now, at, events, window, burst, delta)
  local since, stamp = now - window, int(at)
  if at <= since then return end
  local used, n = sl_used(key, since), 0
  if delta < 0 then
    local old = rcall('ZRANGEBYSCORE', key, stamp, stamp)[1]
    if old then n = -math.min(sl_units(old), -delta) end
  else
    n = math.min(delta, math.max(0, 2 * events - used))
  end
  if n == 0 then return end
  sl_add(key, stamp, n, used, since)
  if rcall('PTTL', key) < 0 then
    rcall('PEXPIRE', key, keep_ms(ceil_div(at + window - now, 1000)))
  end
end

-- sl_lease is the longest quota lease of a window: a fiftieth of it
-- (algorithms.SlidingLogLeaseParts is the twin and says why).
local function sl_lease(window)
  return floor((window + 49) / 50)
end

-- lease_end is the end of a quota lease granted at now (quota_lease.lua):
-- ql later, but no more than sl_lease. Its entry is stamped with it
-- (lease_at_end): it counts from the grant, in the total, until it leaves
-- the window after that end, so a lease holds its units up to that much
-- longer than requests would.
function algorithms.sliding_log.lease_end(now, window, _, ql)
  return now + math.min(ql, sl_lease(window))
end

algorithms.sliding_log.lease_at_end = true

-- grant adds a lease's units as the entry stamped with its end e, and
-- keeps the log until that entry leaves; the key is whole again no
-- sooner (the reset it returns, after what remains: the caller's).
function algorithms.sliding_log.grant(key, now, events, window, burst, units, _, e)
  local since = now - window
  sl_add(key, int(e), units, sl_used(key, since), since)
  sl_keep(key, e + window - now)
  return nil, e + window - now
end
