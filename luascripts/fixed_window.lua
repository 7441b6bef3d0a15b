-- fixed_window: a counter per window. Windows are aligned to the epoch of
-- Redis TIME, so every Caddy node agrees where one starts.
-- State: the window start and the count as two little-endian doubles
-- (struct '<dd', 16 bytes; exact, every value is an integer below 2^53),
-- expiring when the window ends. Unpacking them costs Redis a fraction of
-- parsing "<start> <count>" (strtod of a 16-digit start alone costs about
-- what the GET does) and of formatting it back. Earlier releases stored
-- that text at a key without the ":v2" suffix (keys.go), so releases side
-- by side never read each other's state.
algorithms.fixed_window = {takes = true}

-- fw_load is the stored window start and count, or nil for none (or a
-- value that is not a state).
local function fw_load(key)
  local v = rcall('GET', key)
  if v and #v == 16 then return sunpack('<dd', v) end
  return nil
end

-- fw_first remembers by window start the state of a window's first unit
-- (count 1): every key whose count starts in that window stores the same
-- 16 bytes, and a table lookup costs a fraction of struct.pack.
local fw_first = {}

-- fw_save stores count units for the window at start. A window already
-- counted (before > 0) keeps the expiry its first write set (its end,
-- rounded up to a millisecond): SET KEEPTTL costs Redis half of SET PX,
-- which takes the old expiry out of its table and puts the new one in.
local function fw_save(key, start, count, before, reset)
  local state
  if count == 1 then state = fw_first[start] or remember(fw_first, start, spack('<dd', start, 1))
  else state = spack('<dd', start, count) end
  if before > 0 then rcall('SET', key, state, 'KEEPTTL') else save_until(key, state, reset) end
end

-- fw_period is the period holding now among a calendar zone's period
-- boundaries, "prev_start,start,end,next_end" (µs; algorithms.Periods.At
-- is its twin): its start and end, or nil when now is outside them.
local function fw_period(periods, now)
  local ps, s, e, ne = string.match(periods, '^(%d+),(%d+),(%d+),(%d+)$')
  if not ne then error('fixed_window: bad period boundaries ' .. periods, 0) end
  ps, s, e, ne = num(ps), num(s), num(e), num(ne)
  if now < ps or now >= ne then return nil end
  if now < s then return ps, s end
  if now < e then return s, e end
  return e, ne
end

-- periods is "" for a zone with a window, else a calendar zone's period
-- boundaries (sent in the slot id's place): the window is then the period
-- holding now, whose state counts only in it. Beyond them, the caller's
-- clock and Redis's differ by about a period: nothing is counted
-- (algorithms.ErrClockSkew).
function algorithms.fixed_window.decide(key, now, events, window, burst, cost, periods, _, take)
  local start, count, reset
  local s, n
  local v = rcall('GET', key) -- fw_load, written out
  if v and #v == 16 then s, n = sunpack('<dd', v) end
  if periods == '' then
    start, count = now - now % window, 0
    if s and s >= start then start, count = s, n end
    reset = start + window - now
  else
    local e
    start, e = fw_period(periods, now)
    if not start then
      error("store clock is outside the calendar periods around the caller's clock", 0)
    end
    count = 0
    if s == start then count = n end
    reset = e - now
  end
  local more = 0
  if count > 0 then more = reset end
  -- everything comes back at the window's end: more and reset (before this
  -- request) are that, or 0 for a key with nothing used
  if count + cost <= events then
    if take then -- commit here (see takes in decide.lua)
      fw_save(key, start, count + cost, count, reset)
      return true, events - count - cost, 0, reset, reset
    end
    return true, events - count, 0, more, more, reset, reset, start, count + cost, count, reset
  end
  return false, events - count, reset, more, more, reset, reset
end

-- commit stores the window's new count (fw_save).
algorithms.fixed_window.commit = fw_save

-- settle changes the reservation's count by `delta` (negative: a refund;
-- positive: a debt, at most one more limit), while the reservation's
-- window (the one `at` fell in) is still the stored one.
function algorithms.fixed_window.settle(key, now, at, events, window, burst, delta, periods)
  local s, n = fw_load(key)
  local start
  if periods == '' then start = at - at % window else start = fw_period(periods, at) end
  if s and s == start then
    local count = settled(n, delta, events)
    rcall('SET', key, spack('<dd', s, count), 'KEEPTTL')
  end
end

-- lease_end is the end of a quota lease granted at now (quota_lease.lua):
-- at most ql, and no later than the window (or the period) holding now,
-- in which its units count.
function algorithms.fixed_window.lease_end(now, window, periods, ql)
  local s, e
  if periods == '' then e = now - now % window + window else s, e = fw_period(periods, now) end
  return math.min(now + ql, e)
end

-- grant counts a lease's units in the window holding now, as a request of
-- that cost (which fits: the caller leases no more than remains).
function algorithms.fixed_window.grant(key, now, events, window, burst, units, periods)
  algorithms.fixed_window.decide(key, now, events, window, burst, units, periods, nil, true)
end
