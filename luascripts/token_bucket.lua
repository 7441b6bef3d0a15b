-- token_bucket, GCRA-style: one event is `window` units and the bucket
-- drains `events` units per microsecond, so every rate is exact. The level
-- is held as whole events n and a fraction f < window units
-- (level = n * window + f), since n * window passes 2^53 (10^9 a minute).
-- State: n, f and the time they were counted (µs), three little-endian
-- doubles (struct '<ddd', 24 bytes; exact, every value is an integer below
-- 2^53), kept until drained. Unpacking them costs Redis a fraction of
-- finding and parsing "<level> <time>" text, and of formatting it back.
-- Earlier releases stored that text at a key without the ":v5" suffix
-- (keys.go), so releases side by side never read each other's state.
algorithms.token_bucket = {takes = true}

-- tb_load is the key's level (n, f) and its stored time, or 0, 0, nil for
-- none (or a value that is not a state).
local function tb_load(key)
  local v = rcall('GET', key)
  if v and #v == 24 then return sunpack('<ddd', v) end
  return 0, 0, nil
end

-- tb_drain is the level n * window + f less elapsed * events units, floored at 0.
local function tb_drain(n, f, elapsed, events, window)
  if floor(elapsed / window) > n then return 0, 0 end
  local dn, df = mul_div(elapsed, events, window)
  if dn > n or (dn == n and df >= f) then return 0, 0 end
  n, f = n - dn, f - df
  if f < 0 then n, f = n - 1, f + window end
  return n, f
end

-- tb_fill is the level n * window + f plus ahead * events units: a state
-- counted at a time ahead of now (the Redis clock went back, or a replay's
-- now) holds then what drains until then besides (GCRA: its theoretical
-- arrival time is that far past now). ahead is capped at max_time.
local function tb_fill(n, f, ahead, events, window)
  local dn, df = mul_div(math.min(ahead, max_time), events, window)
  n, f = n + math.min(dn, max_time), f + df
  if f >= window then n, f = n + 1, f - window end
  return n, f
end

-- tb_level is key's level at now: its state drained since it was
-- counted, or filled when counted ahead of now (tb_fill).
local function tb_level(key, now, events, window)
  local n, f, t = tb_load(key)
  if not t then return 0, 0 end
  if t > now then return tb_fill(n, f, t - now, events, window) end
  return tb_drain(n, f, now - t, events, window)
end

-- tb_time is how long n * window + f units take to drain, in µs, rounded up
-- and capped at max_time.
local function tb_time(n, f, events, window)
  local q, r = mul_div(n, window, events)
  if q >= max_time then return max_time end
  return math.min(max_time, q + ceil_div(r + f, events))
end

-- tb_more is how long until the bucket holds one event fewer: the
-- fraction f, or a whole event when there is none.
local function tb_more(n, f, events, window)
  if f > 0 then return ceil_div(f, events) end
  if n > 0 then return ceil_div(window, events) end
  return 0
end

-- tb_state is the state of level n * window + f counted at now.
local function tb_state(n, f, now)
  return spack('<ddd', n, f, now)
end

-- tb_first remembers the last state of whole events alone (f 0) packed,
-- by its n and now: the cold keys a call decides (its requests share
-- now) each store the same 24 bytes, and a comparison costs a fraction
-- of struct.pack.
local tb_first_n, tb_first_now, tb_first

-- tb_whole is tb_state(n, 0, now), remembered (tb_first).
local function tb_whole(n, now)
  if n ~= tb_first_n or now ~= tb_first_now then
    tb_first_n, tb_first_now, tb_first = n, now, spack('<ddd', n, 0, now)
  end
  return tb_first
end

-- te_ remember the times after a take from an empty bucket (tb_time and
-- tb_more of cost events) by cost, events and window: the cold keys of
-- a zone ask the same, and a few comparisons cost a fraction of the
-- arithmetic.
local te_cost, te_events, te_window, te_reset, te_more

-- tb_after is tb_time and tb_more of the level n * window + f plus cost
-- events (te_ for an empty bucket).
local function tb_after(n, f, cost, events, window)
  if n ~= 0 or f ~= 0 then return tb_time(n + cost, f, events, window), tb_more(n + cost, f, events, window) end
  if cost ~= te_cost or events ~= te_events or window ~= te_window then
    te_cost, te_events, te_window = cost, events, window
    te_reset, te_more = tb_time(cost, 0, events, window), tb_more(cost, 0, events, window)
  end
  return te_reset, te_more
end

-- decide admits when the bucket holds cost more events. With max_delay
-- (µs; 0 or nil: none) a request over the limit whose turn comes within
-- it is admitted with a reservation: the level goes past burst, by at most
-- max_delay * events / window events (bounded in validation), and retry
-- is its wait; one that would wait longer is denied with the retry at
-- which its wait is max_delay. It returns its verdict as values (see
-- decide.lua) and, when admitted, the state and its ttl for commit.
function algorithms.token_bucket.decide(key, now, events, window, burst, cost, _, max_delay, take)
  local n, f = tb_level(key, now, events, window)
  local used = n
  if f > 0 then used = used + 1 end
  local reset_after, more_after = tb_after(n, f, cost, events, window)
  if used + cost <= burst then
    local state
    if f == 0 then state = tb_whole(n + cost, now) else state = tb_state(n + cost, f, now) end
    if take then -- commit, written out (see takes in decide.lua); reset and more are not needed
      save_until(key, state, reset_after)
      return true, burst - used - cost, 0, reset_after, more_after
    end
    return true, burst - used, 0, tb_time(n, f, events, window), tb_more(n, f, events, window),
      reset_after, more_after, state, reset_after
  end
  local reset, more = tb_time(n, f, events, window), tb_more(n, f, events, window)
  if cost > burst then
    return false, burst - used, window, reset, more, reset_after, more_after
  end
  -- drain to burst - cost events: n + cost - burst events and f
  local wait = tb_time(n + cost - burst, f, events, window)
  max_delay = max_delay or 0
  if wait > max_delay then
    -- a retry then waits max_delay: t says when that is, never later
    local retry = wait - max_delay
    return false, burst - used, retry, reset, math.min(more, retry), reset_after, more_after
  end
  -- a reservation: its retry is its wait; one unit returns once the level
  -- is under burst
  local state, more_wait = tb_state(n + cost, f, now), tb_time(n + cost - burst + 1, f, events, window)
  if take then
    save(key, state, reset_after)
    return true, burst - used - cost, wait, reset_after, more_wait
  end
  return true, burst - used, wait, reset, more, reset_after, more_wait, state, reset_after
end

-- commit stores the state decide formatted, until it drains (ttl µs).
function algorithms.token_bucket.commit(key, state, ttl)
  save(key, state, ttl)
end

-- settle takes `delta` events out of (negative) or into (positive) the
-- bucket, as of the later of `now` and the state's own time, so no drain
-- is counted twice. Above capacity the level is a debt that later requests
-- wait out, bounded by 2 × burst (so n * window + f stays exact).
function algorithms.token_bucket.settle(key, now, at, events, window, burst, delta)
  local n, f, t = tb_load(key)
  local time = now
  if t then
    time = math.max(now, t)
    n, f = tb_drain(n, f, time - t, events, window)
  end
  local limit = math.max(2 * burst, n) -- a reservation (max_delay) may pass the cap: keep it whole
  n = n + math.min(math.max(delta, -limit), limit)
  if n < 0 then n, f = 0, 0 elseif n >= limit then n, f = limit, 0 end
  save(key, tb_state(n, f, time), tb_time(n, f, events, window))
end

-- tb_lease_slot is the longest quota lease of a window: a twentieth of
-- it, as a sliding_window slot (algorithms.slotLease is the twin), so
-- what drains during a lease and is held too (see grant) is at most that
-- much of a window.
local function tb_lease_slot(window)
  return floor((window + 19) / 20)
end

-- lease_end is the end of a quota lease of units granted at now
-- (quota_lease.lua): ql later, but no more than tb_lease_slot (what
-- drains meanwhile is held too, see grant), and no
-- later than the bucket can hold the units and what drains until the
-- end, burst in all.
function algorithms.token_bucket.lease_end(now, window, _, ql, events, burst, units)
  local q = mul_div(burst - units, window, events)
  return now + math.min(ql, tb_lease_slot(window), q)
end

algorithms.token_bucket.lease_taken_at_end = true

-- grant takes a lease's units as if at its end e (GCRA: TAT' = max(TAT,
-- e) + units × interval), written as the level at now: the greater of the
-- level and what drains until e, plus the units (lease_end keeps it
-- within burst; the units are available now: the caller leases no more
-- than remains). A give-back takes them out again (settle), exactly so
-- before e and before any later grant. It returns what remains then, and
-- when the bucket is whole again and has one more.
function algorithms.token_bucket.grant(key, now, events, window, burst, units, _, e)
  local n, f = tb_level(key, now, events, window)
  local dn, df = mul_div(e - now, events, window)
  if dn > n or (dn == n and df > f) then n, f = dn, df end
  n = n + units
  local reset = tb_time(n, f, events, window)
  save(key, tb_state(n, f, now), reset)
  local used = n
  if f > 0 then used = used + 1 end
  -- what remains (less than before by the units and what drains until
  -- e), and when the bucket is whole again and has one more
  return burst - used, reset, tb_more(n, f, events, window)
end
