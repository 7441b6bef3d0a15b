-- decide: a batch of requests' verdicts, in order, each over all its zones
-- atomically; a later request sees what the earlier ones consumed.
-- keys: every request's zone keys, request after request.
-- argv[1]: the number of requests. Then per request: its mode, its now and
-- its zone count, then per zone its ZONE_ARGS arguments.
-- mode: "1" to consume when the request is admitted, "0" to only look,
-- "settle" to settle what a request reserved (see settle_request).
-- now: µs, or "" for Redis TIME (the one clock; read once per call).
-- Per zone: algorithm, events, window (µs), burst, cost, "1" for a dry-run
-- zone (it counts, but its denial admits), the request's lease id
-- (concurrency zones; for a fixed_window zone with a calendar period its
-- period boundaries, "prev_start,start,end,next_end" in µs, the window
-- then 0; "" for others) and max_delay (µs; token_bucket
-- only, "0" when unset). An admitting zone's retry is its delay: a
-- reservation's wait (max_delay), else 0.
-- A request is admitted when every enforced zone admits; then every zone
-- that admits consumes, and when it is not, none does.
-- Returns per request: per zone (none for a settlement) 2 × remaining +
-- allowed (1/0) in one integer (each integer of the reply costs Redis
-- about a third of a GET), retry after (µs), reset (µs: until the quota is
-- whole), more (µs: until a unit of it returns); then the request's now. A request that
-- fails (a Redis error, say WRONGTYPE, or a bad argument) returns one error
-- reply instead, and the batch goes on: one request's failure is not its
-- neighbours'. (Writes it made before failing stay, as with any script.)
-- Overrides: a zone with overrides names its algorithm with the suffix
-- ':o' (e.g. "token_bucket:o"); its key's override, the hash at key ..
-- ':o' (same hash tag, so the same Cluster slot) with fields e (events),
-- b (burst: the capacity) and optionally x (µs of the store's clock when
-- it ends), replaces the zone's events and burst while it is in force, and
-- the zone's reply carries two more values: the events and burst in force
-- by override (0 and 0 when none is). Other zones read nothing more and
-- reply as before. The override key is derived here, not passed among
-- KEYS, so that a zone without overrides sends exactly what it always
-- has; it shares the state key's hash tag, so Cluster serves it from the
-- same node (and MIGRATE moves it with the state).
-- Bans: a zone with a ban names its algorithm (with or without ':o')
-- followed by ':b' and the ban in seconds (e.g. "token_bucket:b3600").
-- Before deciding, it reads its key's ban, the string at key .. ':b' (the
-- same hash tag: the same Cluster slot) holding the ban's end in µs of the
-- store's clock: while now is before it, the zone denies without reading
-- its state, remaining 0 and retry, reset and more the ban's remaining
-- time (the request then consumes nothing anywhere). A zone that denies
-- in a consuming call and is not a dry run sets the ban (SET … PX: the
-- key goes when the ban ends). Its reply carries one more value, after an
-- override's: 0 not banned, 1 banned, 2 banned by this call. Zones
-- without a ban read nothing more and reply as before.
local ZONE_ARGS = 8

local overridable = {
  ['fixed_window:o'] = algorithms.fixed_window, ['sliding_window:o'] = algorithms.sliding_window,
  ['sliding_log:o'] = algorithms.sliding_log, ['token_bucket:o'] = algorithms.token_bucket,
  ['concurrency:o'] = algorithms.concurrency,
}

-- override_of is the override of key in force at now: events and burst,
-- or nil.
local function override_of(key, now)
  local o = redis.call('HMGET', key .. ':o', 'e', 'b', 'x')
  if not o[1] then return nil end
  if o[3] and now >= tonumber(o[3]) then return nil end
  return tonumber(o[1]), tonumber(o[2])
end

-- Each algorithm's decide(key, now, events, window, burst, cost, lease,
-- max_delay) returns, without building a table: allowed (true/false),
-- remaining, retry (an admission's: its delay), reset, more (as of now,
-- nothing consumed), reset and more once the request is consumed, then up
-- to four values c1..c4 that its commit(key, c1, c2, c3, c4) stores when
-- the request is admitted.
-- The per-zone values live in these arrays, reused by every request of
-- every call (a Function's upvalues live as long as its library): no table
-- or closure per request or zone.
local z_commit, z_key, z_cost, z_ok, z_rem, z_retry, z_reset, z_more = {}, {}, {}, {}, {}, {}, {}, {}
local z_reset_after, z_more_after, z_c1, z_c2, z_c3, z_c4 = {}, {}, {}, {}, {}, {}
local z_oe, z_ob = {}, {} -- a zone with overrides: events, burst by override; nil for others
local z_ban = {} -- a zone with a ban: 0, 1 or 2 (see Bans); nil for others

-- banning holds the zones with a ban met so far: name → {algorithm,
-- overrides, ban in µs}; cleared when it grows past a few hundred names.
local banning, banning_n = {}, 0

-- ban_zone reads an algorithm argument with a ban: its algorithm, whether
-- it has overrides, and its ban in µs.
local function ban_zone(name)
  local z = banning[name]
  if z then return z[1], z[2], z[3] end
  local base, secs = string.match(tostring(name), '^(.-):b(%d+)$')
  local alg, over = base and algorithms[base], false
  if base and not alg then alg, over = overridable[base], true end
  if not alg then error('unknown algorithm ' .. tostring(name)) end
  if banning_n >= 256 then banning, banning_n = {}, 0 end
  banning[name], banning_n = {alg, over, tonumber(secs) * 1000000}, banning_n + 1
  return alg, over, tonumber(secs) * 1000000
end

local function zone_args(argv, a)
  local alg, over, ban = algorithms[argv[a]], false, nil
  if not alg then
    alg, over = overridable[argv[a]], true
    if not alg then alg, over, ban = ban_zone(argv[a]) end
  end
  local e, w, b, c, d = argv[a + 1], argv[a + 2], argv[a + 3], argv[a + 4], argv[a + 7]
  return alg, memo[e] or num(e), memo[w] or num(w), memo[b] or num(b), memo[c] or num(c),
    argv[a + 5], argv[a + 6], memo[d] or num(d), over, ban
end

-- ban_end is the end (µs) of key's ban in force at now, or nil.
local function ban_end(key, now)
  local u = tonumber(redis.call('GET', key .. ':b'))
  if u and now < u then return u end
  return nil
end

-- decide_over decides a zone with overrides: with its key's override in
-- force, if any, instead of events and burst. A cost above the override's
-- capacity is denied without touching state (as algorithms.OverCapacity
-- does for the request's own). It returns the algorithm's values, then
-- the events and burst by override (0, 0: none).
local function decide_over(alg, key, now, events, window, burst, cost, lease, max_delay)
  local oe, ob = override_of(key, now)
  if not oe then
    local ok, rem, retry, reset, more, ra, ma, c1, c2, c3, c4 =
      alg.decide(key, now, events, window, burst, cost, lease, max_delay)
    return ok, rem, retry, reset, more, ra, ma, c1, c2, c3, c4, 0, 0
  end
  if cost > ob then
    return false, ob, window, 0, 0, 0, 0, nil, nil, nil, nil, oe, ob
  end
  local ok, rem, retry, reset, more, ra, ma, c1, c2, c3, c4 =
    alg.decide(key, now, oe, window, ob, cost, lease, max_delay)
  return ok, rem, retry, reset, more, ra, ma, c1, c2, c3, c4, oe, ob
end

-- decide_ban decides a zone with a ban (see Bans above): banned, it
-- denies without its state; else it decides (with its override when it
-- has overrides) and a denial in a consuming call of an enforced zone
-- sets the ban. It returns decide_over's values (oe, ob nil without
-- overrides), then the ban state: 0, 1 or 2.
local function decide_ban(alg, key, now, events, window, burst, cost, lease, max_delay, over, ban, consume, dry_run)
  local oe, ob
  local enforced = dry_run ~= '1'
  local u = enforced and ban_end(key, now)
  if u then
    if over then oe, ob = override_of(key, now) end
    local left = u - now
    return false, 0, left, left, left, left, left, nil, nil, nil, nil, oe or (over and 0), ob or (over and 0), 1
  end
  local ok, rem, retry, reset, more, ra, ma, c1, c2, c3, c4
  if over then
    ok, rem, retry, reset, more, ra, ma, c1, c2, c3, c4, oe, ob =
      decide_over(alg, key, now, events, window, burst, cost, lease, max_delay)
  else
    ok, rem, retry, reset, more, ra, ma, c1, c2, c3, c4 =
      alg.decide(key, now, events, window, burst, cost, lease, max_delay)
  end
  if ok or not consume or not enforced then
    return ok, rem, retry, reset, more, ra, ma, c1, c2, c3, c4, oe, ob, 0
  end
  redis.call('SET', key .. ':b', now + ban, 'PX', math.ceil(ban / 1000))
  if reset < ban then reset = ban end
  return false, 0, ban, reset, ban, ra, ma, c1, c2, c3, c4, oe, ob, 2
end

local function redis_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- settle_request settles n zones (keys[k+1..], argv[a..]) at now: after a
-- response, or when another slot's zone denied the request on Redis
-- Cluster. Per zone the same arguments, with cost = delta (negative: give
-- back; positive: take more) and the dry-run flag = the reservation's time
-- in µs; every key settles on its own.
local function settle_request(keys, k, argv, a, n, now)
  for i = 1, n do
    local alg, events, window, burst, delta, at, lease = zone_args(argv, a + (i - 1) * ZONE_ARGS)
    alg.settle(keys[k + i], now, tonumber(at), events, window, burst, delta, lease)
  end
end

-- decide_any is zone's verdict: through its ban and its override when it
-- has them (their extra values follow alg.decide's), else alg.decide's.
local function decide_any(alg, key, now, events, window, burst, cost, lease, max_delay, over, ban, consume, dry_run)
  if ban then
    return decide_ban(alg, key, now, events, window, burst, cost, lease, max_delay, over, ban, consume, dry_run)
  elseif over then
    return decide_over(alg, key, now, events, window, burst, cost, lease, max_delay)
  end
  return alg.decide(key, now, events, window, burst, cost, lease, max_delay)
end

-- put_verdict writes one zone's verdict to out from o + 1: allowed folded
-- into remaining, retry, reset and more, then the limits in force of a zone
-- with overrides (oe, ob) and the ban state of a zone with a ban, when
-- set; it returns the new end of out.
local function put_verdict(out, o, ok, remaining, retry, reset, more, oe, ob, banned)
  out[o + 1], out[o + 2], out[o + 3], out[o + 4] = 2 * remaining + (ok and 1 or 0), retry, reset, more
  o = o + 4
  if oe then
    out[o + 1], out[o + 2] = oe, ob
    o = o + 2
  end
  if banned then
    out[o + 1] = banned
    o = o + 1
  end
  return o
end

-- decide_zone stores zone i's verdict in the z_ arrays; it returns whether
-- the zone lets the request through (admitted, or dry run).
local function decide_zone(i, alg, key, now, events, window, burst, cost, dry_run, lease, max_delay, over, ban, consume)
  local ok, rem, retry, reset, more, reset_after, more_after, c1, c2, c3, c4, oe, ob, banned =
    decide_any(alg, key, now, events, window, burst, cost, lease, max_delay, over, ban, consume, dry_run)
  z_commit[i], z_key[i], z_cost[i], z_ok[i], z_rem[i], z_retry[i], z_reset[i], z_more[i] =
    alg.commit, key, cost, ok, rem, retry, reset, more
  z_reset_after[i], z_more_after[i], z_c1[i], z_c2[i], z_c3[i], z_c4[i] =
    reset_after, more_after, c1, c2, c3, c4
  z_oe[i], z_ob[i], z_ban[i] = oe, ob, banned
  return ok or dry_run == '1'
end

-- decide_one is decide_request for a request of one zone, the common case:
-- nothing to keep between deciding and committing.
local function decide_one(key, argv, a, now, consume, out, o)
  local alg, events, window, burst, cost, dry_run, lease, max_delay, over, ban = zone_args(argv, a)
  local ok, rem, retry, reset, more, reset_after, more_after, c1, c2, c3, c4, oe, ob, banned =
    decide_any(alg, key, now, events, window, burst, cost, lease, max_delay, over, ban, consume, dry_run)
  if ok and consume then
    alg.commit(key, c1, c2, c3, c4)
    rem, reset, more = rem - cost, reset_after, more_after
  end
  return put_verdict(out, o, ok, rem, retry, reset, more, oe, ob, banned)
end

-- decide_request decides one request of n zones (keys[k+1..], argv[a..])
-- at now and writes its verdicts to out from o + 1; it returns the new end
-- of out.
local function decide_request(keys, k, argv, a, n, now, consume, out, o)
  if n == 1 then return decide_one(keys[k + 1], argv, a, now, consume, out, o) end
  local admit = true
  for i = 1, n do
    local alg, events, window, burst, cost, dry_run, lease, max_delay, over, ban = zone_args(argv, a + (i - 1) * ZONE_ARGS)
    admit = decide_zone(i, alg, keys[k + i], now, events, window, burst, cost, dry_run, lease, max_delay, over, ban, consume) and admit
  end
  local commit = admit and consume
  for i = 1, n do
    local ok, remaining, reset, more = z_ok[i], z_rem[i], z_reset[i], z_more[i]
    if commit and ok then
      z_commit[i](z_key[i], z_c1[i], z_c2[i], z_c3[i], z_c4[i])
      remaining, reset, more = remaining - z_cost[i], z_reset_after[i], z_more_after[i]
    end
    o = put_verdict(out, o, ok, remaining, z_retry[i], reset, more, z_oe[i], z_ob[i], z_ban[i])
  end
  return o
end

-- failed replaces what a failed request appended to out after mark with
-- one error reply: Redis's own (it is already one), or a Lua error's text.
local function failed(out, mark, err)
  for i = #out, mark + 1, -1 do out[i] = nil end
  if type(err) == 'string' then err = {err = 'ERR ' .. err} end
  out[mark + 1] = err
end

local function decide_batch(keys, argv)
  local out, o, k, a, clock = {}, 0, 0, 2, nil
  for _ = 1, tonumber(argv[1]) do
    local mode, now, n = argv[a], tonumber(argv[a + 1]), num(argv[a + 2])
    a = a + 3
    if not now then
      clock = clock or redis_now()
      now = clock
    end
    local ok, res
    if mode == 'settle' then
      ok, res = pcall(settle_request, keys, k, argv, a, n, now)
      if ok then res = o end
    else
      ok, res = pcall(decide_request, keys, k, argv, a, n, now, mode == '1', out, o)
    end
    if ok then
      o = res + 1
      out[o] = now
    else
      failed(out, o, res)
      o = o + 1
    end
    k, a = k + n, a + n * ZONE_ARGS
  end
  return out
end
