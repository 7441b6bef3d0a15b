-- decide: a batch of requests' verdicts, in order, each over all its zones
-- atomically; a later request sees what the earlier ones consumed.
-- keys: every request's zone keys, request after request.
-- argv: one string per request, its fields separated by single spaces
-- (no field holds a space): its mode, its now and its zone count, then per
-- zone its ZONE_ARGS fields (request.lua reads them). One string, not a dozen arguments: Redis
-- spends about as much on each argument of a call as on a GET, and the
-- strings a zone sends repeat from request to request, so they are parsed
-- once and remembered (see parse). An empty string, after the first,
-- is the string of the request before it, sent again: the requests of a
-- batch often are (one zone's cold keys), and Redis spends on an
-- argument by its length.
-- mode: "1" to consume when the request is admitted, "0" to only look,
-- "settle" to settle what a request reserved (see settle_request).
-- now: µs, or "" for Redis TIME (the one clock; read once per call).
-- Per zone: algorithm, events, window (µs), burst, cost, "1" for a dry-run
-- zone (it counts, but its denial admits), the request's slot id
-- (concurrency zones; for a fixed_window zone with a calendar period its
-- period boundaries, "prev_start,start,end,next_end" in µs, the window
-- then 0; "" for others) and max_delay (µs; token_bucket
-- only, "0" when unset). An admitting zone's retry is its delay: a
-- reservation's wait (max_delay), else 0.
-- A request is admitted when every enforced zone admits; then every zone
-- that admits consumes, and when it is not, none does.
-- Returns per request, as little-endian doubles (exact: every value is an
-- integer below 2^53): per zone (none for a settlement) 2 × remaining +
-- allowed (1/0), retry after (µs), reset (µs: until the quota is whole),
-- more (µs: until a unit of it returns); then the request's now. The
-- requests' values follow one another in one string: one bulk reply costs
-- Redis less than a single integer of a table reply. A request that fails
-- (a Redis error, say WRONGTYPE, or a bad argument) gets an error reply
-- instead: the reply is then a table of one string or error per request,
-- and the batch goes on: one request's failure is not its neighbours'.
-- A call of one request fails as a whole instead. (Writes a request made
-- before failing stay, as with any script.)
-- Overrides and bans hang off the key without its state format's suffix
-- (state_base): they are no state, and outlive a change of format. The
-- names of earlier releases, after the state key itself, are read when
-- the new name holds nothing (a ban's both in one MGET).
-- Overrides: a zone with overrides names its algorithm with the suffix
-- ':o' (e.g. "token_bucket:o"); its key's override, the hash at base ..
-- ':o' (same hash tag, so the same Cluster slot) with fields e (events),
-- b (burst: the capacity) and optionally x (µs of the store's clock when
-- it ends), replaces the zone's events and burst while it is in force, and
-- the zone's reply carries two more values: the events and burst in force
-- by override (0 and 0 when none is). Other zones read nothing more and
-- reply with their algorithm's values alone. The override key is derived
-- here, not passed among KEYS, so that a zone without overrides sends its
-- state key alone; it shares the state key's hash tag, so Cluster serves it from the
-- same node (and MIGRATE moves it with the state).
-- Bans: a zone with a ban names its algorithm (with or without ':o')
-- followed by ':b' and the ban in seconds (e.g. "token_bucket:b3600").
-- Before deciding, it reads its key's ban, the string at base .. ':b' (the
-- same hash tag: the same Cluster slot) holding the ban's end in µs of the
-- store's clock: while now is before it, the zone denies without reading
-- its state, remaining 0 and retry, reset and more the ban's remaining
-- time (the request then consumes nothing anywhere). A zone that denies
-- in a consuming call and is not a dry run sets the ban (SET … PX: the
-- key goes when the ban ends). Its reply carries one more value, after an
-- override's: 0 not banned, 1 banned, 2 banned by this call. Zones
-- without a ban read nothing more and reply without it.

-- announce tells every instance that key's state changed under its
-- quota leases (a ban), as a reset does: on ResetChannel
-- (redisstore/resets.go), so they drop the key's leases and cached
-- denials. Best effort, as a reset's: a user without the channel's
-- permission still gets its decision.
local function announce(key)
  redis.pcall('PUBLISH', 'sluice:reset', key)
end

-- state_base is key without its state format's suffix, ':v' and digits
-- (algorithms.StateBase is the twin): the name its override and ban hang
-- off.
local function state_base(key)
  return string.match(key, '^(.*):v%d+$') or key
end

-- override_of is the override of key (whose base is base) in force at
-- now: events and burst, or nil.
local function override_of(key, base, now)
  local events, burst, ends = unpack(rcall('HMGET', base .. ':o', 'e', 'b', 'x'))
  if not events and base ~= key then events, burst, ends = unpack(rcall('HMGET', key .. ':o', 'e', 'b', 'x')) end
  if not events then return nil end
  if ends and now >= tonum(ends) then return nil end
  return tonum(events), tonum(burst)
end

-- override_end is when key's override ends (µs of the store's clock), or
-- nil for one that lasts until it is cleared: a quota lease granted under
-- it ends no later (quota_lease.lua).
local function override_end(key)
  local base = state_base(key)
  local x = rcall('HGET', base .. ':o', 'x')
  if not x and base ~= key then x = rcall('HGET', key .. ':o', 'x') end
  return tonum(x)
end

-- Each algorithm's decide(key, now, events, window, burst, cost, slot,
-- max_delay) returns, without building a table: allowed (true/false),
-- remaining, retry (an admission's: its delay), reset, more (as of now,
-- nothing consumed), reset and more once the request is consumed, then up
-- to four values c1..c4 that its commit(key, c1, c2, c3, c4) stores when
-- the request is admitted.
-- An algorithm whose table has takes = true also takes a ninth argument,
-- take: set for a plain request (see parse) that consumes, it asks decide
-- to commit an admitted request itself and to return only allowed,
-- remaining, retry, reset and more as of after it (a denial's values are
-- as without take). A plain request's call is then one Lua call, with no
-- commit values passed back and forth.
-- The per-zone values live in these arrays, reused by every request of
-- every call (a Function's upvalues live as long as its library): no table
-- or closure per request or zone.
local z_commit, z_key, z_cost, z_ok, z_rem, z_retry, z_reset, z_more = {}, {}, {}, {}, {}, {}, {}, {}
local z_reset_after, z_more_after, z_c1, z_c2, z_c3, z_c4 = {}, {}, {}, {}, {}, {}
local z_oe, z_ob = {}, {} -- a zone with overrides: events, burst by override; nil for others
local z_ban = {} -- a zone with a ban: 0, 1 or 2 (see Bans); nil for others

-- ban_end is the end (µs) of key's ban (key's base is base) in force at
-- now, or nil.
local function ban_end(key, base, now)
  local u
  if base == key then
    u = tonum(rcall('GET', key .. ':b'))
  else
    local now_ends, before_ends = unpack(rcall('MGET', base .. ':b', key .. ':b'))
    u = math.max(tonum(now_ends) or 0, tonum(before_ends) or 0)
  end
  if u and now < u then return u end
  return nil
end

-- never_passes is the retry of a cost above the capacity in force: nothing
-- it waits for admits it, so the longest honest wait, the window, or for a
-- calendar zone (window 0, its periods in the slot id's place) what remains
-- of the period holding now (algorithms.Limit.NeverRetryAt is the twin).
local function never_passes(window, periods, now)
  if window > 0 then return window end
  local _, e = fw_period(periods, now)
  if not e then error("store clock is outside the calendar periods around the caller's clock", 0) end
  return e - now
end

-- in_force is the limit in force for key at now: with overrides (over),
-- its override's events and burst (burst carries the capacity) instead of
-- the zone's, and no more than leased_e and leased_b (a key with units out
-- in quota leases granted under them: one limit per lease; nil for none),
-- then the override's (0, 0: none; nil, nil without overrides), then
-- whether cost is above the capacity in force. Such a
-- cost is denied without touching state (over_capacity), as
-- algorithms.OverCapacityAt does before the call for a zone without
-- overrides or a ban: the Go side sends such a zone any cost up to
-- MaxEvents + 1, since only this call knows the override and the ban
-- (docs/algorithms.md, Cost).
local function in_force(key, base, now, events, burst, cost, over, leased_e, leased_b)
  local oe, ob
  if over then
    oe, ob = override_of(key, base, now)
    if oe then events, burst = oe, ob end
    oe, ob = oe or 0, ob or 0
  end
  if leased_e then events, burst = math.min(events, leased_e), math.min(burst, leased_b) end
  return events, burst, oe, ob, cost > burst
end

-- over_capacity is the values of a zone whose cost is above the capacity
-- in force (burst): denied, with the longest honest wait, state untouched,
-- then oe, ob and the ban state (ban, nil for a zone without a ban).
local function over_capacity(burst, window, slot, now, oe, ob, ban)
  return false, burst, never_passes(window, slot, now), 0, 0, 0, 0, nil, nil, nil, nil, oe, ob, ban
end

-- decide_over decides a zone with overrides: with its key's override in
-- force, if any, instead of events and burst (in_force, with the leased
-- limit le, lb). It returns the algorithm's values, then the events and
-- burst by override (0, 0: none).
local function decide_over(alg, key, now, events, window, burst, cost, slot, max_delay, le, lb)
  local events, burst, oe, ob, too_much = in_force(key, state_base(key), now, events, burst, cost, true, le, lb)
  if too_much then return over_capacity(burst, window, slot, now, oe, ob) end
  local ok, rem, retry, reset, more, ra, ma, c1, c2, c3, c4 =
    alg.decide(key, now, events, window, burst, cost, slot, max_delay)
  return ok, rem, retry, reset, more, ra, ma, c1, c2, c3, c4, oe, ob
end

-- decide_ban decides a zone with a ban (see Bans above): banned, it
-- denies without its state, whatever the cost; else it decides (with its
-- override when it has overrides) and a denial in a consuming call of an
-- enforced zone sets the ban. A cost above the capacity in force (the Go
-- side leaves it to this call, which reads the ban) is answered after the
-- ban, as the memory store does, and never bans: it is no attempt that
-- could pass. With units out in quota leases (spare, for a zone that
-- leases), a denial trips the ban only if the request would be denied
-- with them counted as free (and le, lb the limit they were granted
-- under). A ban tripped with leases out is announced. It returns
-- decide_over's values (oe, ob nil without overrides), then the ban
-- state: 0, 1 or 2.
local function decide_ban(alg, key, now, events, window, burst, cost, slot, max_delay, over, ban, consume, dry_run, spare, le, lb)
  local base = state_base(key)
  local events, burst, oe, ob, too_much = in_force(key, base, now, events, burst, cost, over, le, lb)
  local enforced = dry_run ~= '1'
  local u = enforced and ban_end(key, base, now)
  if u then
    local left = u - now
    return false, 0, left, left, left, left, left, nil, nil, nil, nil, oe, ob, 1
  end
  if too_much then return over_capacity(burst, window, slot, now, oe, ob, 0) end
  local ok, rem, retry, reset, more, ra, ma, c1, c2, c3, c4 =
    alg.decide(key, now, events, window, burst, cost, slot, max_delay)
  if ok or not consume or not enforced or (spare and rem + spare >= cost) then
    return ok, rem, retry, reset, more, ra, ma, c1, c2, c3, c4, oe, ob, 0
  end
  rcall('SET', base .. ':b', now + ban, 'PX', keep_ms(math.ceil(ban / 1000)))
  -- the holders of its leases drop them: a zone that leases knows its
  -- units out; one that does not (quota_lease off, where a zone of its
  -- name elsewhere leases) looks for the key's lease bookkeeping
  if (spare and spare > 0) or (not spare and rcall('EXISTS', base .. ':q') == 1) then announce(key) end
  if reset < ban then reset = ban end
  return false, 0, ban, reset, ban, ra, ma, c1, c2, c3, c4, oe, ob, 2
end

-- redis_now is Redis TIME in µs. Its seconds change once a second: memo
-- remembers them, so only the microseconds are read afresh.
local function redis_now()
  local secs, us = unpack(rcall('TIME'))
  return (memo[secs] or num(secs)) * 1000000 + us -- Lua's + reads the digits: no tonumber call
end

-- settle_request settles request r's n zones (keys[k+1..]) at now: after a
-- response, or when another slot's zone denied the request on Redis
-- Cluster. Per zone the same fields, with cost = delta (negative: give
-- back; positive: take more) and the dry-run flag = the reservation's time
-- in µs; every key settles on its own.
local function settle_request(keys, k, r, n, now)
  for i = 1, n do
    local alg, events, window, burst, delta, at, slot = zone_of(r, i)
    alg.settle(keys[k + i], now, tonum(at), events, window, burst, delta, slot)
  end
end

-- decide_any is zone's verdict: through its ban and its override when it
-- has them (their extra values follow alg.decide's; le, lb the leased
-- limit of a zone that leases, see in_force), else alg.decide's.
local function decide_any(alg, key, now, events, window, burst, cost, slot, max_delay, over, ban, consume, dry_run, spare, le, lb)
  if ban then
    return decide_ban(alg, key, now, events, window, burst, cost, slot, max_delay, over, ban, consume, dry_run, spare, le, lb)
  elseif over then
    return decide_over(alg, key, now, events, window, burst, cost, slot, max_delay, le, lb)
  end
  return alg.decide(key, now, events, window, burst, cost, slot, max_delay)
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

-- vals holds a request's reply values before they are packed; formats
-- remembers struct.pack's format for each count of them.
local vals, formats = {}, {}

-- pack is a request's reply: out[1..o], then now, as doubles.
local function pack(out, o, now)
  o = o + 1
  out[o] = now
  local f = formats[o]
  if not f then
    f = '<' .. string.rep('d', o)
    formats[o] = f
  end
  return spack(f, unpack(out, 1, o))
end

-- decide_zone stores zone i's verdict in the z_ arrays; it returns whether
-- the zone lets the request through (admitted, or dry run). spare: the
-- key's units out in quota leases, for a zone that leases, and le, lb the
-- limit they were granted under (in_force).
local function decide_zone(i, alg, key, now, events, window, burst, cost, dry_run, slot, max_delay, over, ban, consume, spare, le, lb)
  local ok, rem, retry, reset, more, reset_after, more_after, c1, c2, c3, c4, oe, ob, banned =
    decide_any(alg, key, now, events, window, burst, cost, slot, max_delay, over, ban, consume, dry_run, spare, le, lb)
  z_commit[i], z_key[i], z_cost[i], z_ok[i], z_rem[i], z_retry[i], z_reset[i], z_more[i] =
    alg.commit, key, cost, ok, rem, retry, reset, more
  z_reset_after[i], z_more_after[i], z_c1[i], z_c2[i], z_c3[i], z_c4[i] =
    reset_after, more_after, c1, c2, c3, c4
  z_oe[i], z_ob[i], z_ban[i] = oe, ob, banned
  return ok or dry_run == '1'
end

-- commit_zone commits zone i's verdict (decide_zone) when it admits: its
-- remaining, reset and more are then as of after it.
local function commit_zone(i)
  if z_ok[i] then
    z_commit[i](z_key[i], z_c1[i], z_c2[i], z_c3[i], z_c4[i])
    z_rem[i], z_reset[i], z_more[i] = z_rem[i] - z_cost[i], z_reset_after[i], z_more_after[i]
  end
end

-- zone_verdict is zone i's verdict (decide_zone, commit_zone): allowed,
-- remaining, reset, more, and the events and burst by override (nil
-- without overrides).
local function zone_verdict(i)
  return z_ok[i], z_rem[i], z_reset[i], z_more[i], z_oe[i], z_ob[i]
end

-- set_zone sets zone i's remaining, reset and more: what they are once
-- something other than its request took from it (a quota lease).
local function set_zone(i, remaining, reset, more)
  z_rem[i], z_reset[i], z_more[i] = remaining, reset, more
end

-- put_zone writes zone i's verdict to out from o + 1 (put_verdict); it
-- returns the new end of out.
local function put_zone(out, o, i)
  return put_verdict(out, o, z_ok[i], z_rem[i], z_retry[i], z_reset[i], z_more[i], z_oe[i], z_ob[i], z_ban[i])
end

-- decide_one is decide_request for a request of one zone with an override
-- or a ban (decide_plain decides the others): nothing to keep between
-- deciding and committing.
local function decide_one(key, r, now, consume)
  local alg, events, window, burst, cost, dry_run, slot, max_delay, over, ban = zone_of(r, 1)
  local ok, rem, retry, reset, more, reset_after, more_after, c1, c2, c3, c4, oe, ob, banned =
    decide_any(alg, key, now, events, window, burst, cost, slot, max_delay, over, ban, consume, dry_run)
  if ok and consume then
    alg.commit(key, c1, c2, c3, c4)
    rem, reset, more = rem - cost, reset_after, more_after
  end
  return pack(vals, put_verdict(vals, 0, ok, rem, retry, reset, more, oe, ob, banned), now)
end

-- decide_request decides request r of n zones (keys[k+1..]) at now; it
-- returns its reply.
local function decide_request(keys, k, r, n, now, consume)
  if n == 1 then return decide_one(keys[k + 1], r, now, consume) end
  local admit = true
  for i = 1, n do
    local alg, events, window, burst, cost, dry_run, slot, max_delay, over, ban = zone_of(r, i)
    admit = decide_zone(i, alg, keys[k + i], now, events, window, burst, cost, dry_run, slot, max_delay, over, ban, consume)
      and admit
  end
  local o = 0
  for i = 1, n do
    if admit and consume then commit_zone(i) end
    o = put_zone(vals, o, i)
  end
  return pack(vals, o, now)
end

-- plain_verdict is the verdict of request r at now when it is plain (see
-- parse) or unleased (quota_lease.lua): one zone, without override or
-- ban; take: its algorithm commits as it decides; consume: the request
-- consumes. It returns allowed folded into remaining, retry, reset and
-- more, unpacked. It is written out flat: every call and table lookup it
-- saves is a measurable part of a call's cost.
local function plain_verdict(key, r, now, take, consume)
  local alg, cost = r.alg, r.cost
  if take then
    local ok, rem, retry, reset, more = alg.decide(key, now, r.events, r.window, r.burst, cost, r.slot, r.max_delay, true)
    return 2 * rem + (ok and 1 or 0), retry, reset, more
  end
  local ok, rem, retry, reset, more, reset_after, more_after, c1, c2, c3, c4 =
    alg.decide(key, now, r.events, r.window, r.burst, cost, r.slot, r.max_delay)
  if ok and consume then
    alg.commit(key, c1, c2, c3, c4)
    rem, reset, more = rem - cost, reset_after, more_after
  end
  return 2 * rem + (ok and 1 or 0), retry, reset, more
end

-- The last plain reply packed (plain_reply), by its values: the
-- requests of one call share now, and cold keys of one zone then get the
-- same verdict (their first unit in the same window, slot or bucket
-- level), so each repeats its predecessor's reply.
local last_v, last_retry, last_reset, last_more, last_now, last_reply

-- plain_reply is a plain request's reply: its verdict and now, packed,
-- or the last one's when they are the same (struct.pack of five doubles
-- costs Redis several times the comparisons).
local function plain_reply(v, retry, reset, more, now)
  if v == last_v and now == last_now and reset == last_reset and more == last_more and retry == last_retry then
    return last_reply
  end
  last_v, last_retry, last_reset, last_more, last_now = v, retry, reset, more, now
  last_reply = spack('<ddddd', v, retry, reset, more, now)
  return last_reply
end

-- decide_plain decides request r at now when it is plain, to consume or
-- to look; its reply is packed at once.
local function decide_plain(key, r, now)
  local v, retry, reset, more = plain_verdict(key, r, now, r.take, r.mode == '1')
  return plain_reply(v, retry, reset, more, now)
end
