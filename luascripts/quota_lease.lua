-- quota_lease: leasing requests (algorithms/quota_lease.go; docs/algorithms.md,
-- "Quota leases"). A request whose mode ends in 'q' ("1q" to consume,
-- "0q" to look, "settleq" to settle) carries one more field per zone
-- (request.lua's parse_quota). A zone that leases reads its key's lease
-- bookkeeping, the hash at base .. ':q' (same hash tag, so the same
-- Cluster slot):
--   g  the key's generation (0 in a new hash; its first grant sets it to
--      Redis TIME in µs, so a hash lost to FLUSHALL or a restart without
--      persistence starts above every generation it gave out): a reset
--      or an override raises it,
--      and a give-back of an earlier generation does nothing
--   o<id>  each grant's end (µs), units not given back and generation,
--      "<end>,<units>,<g>": the units out are those of the grants of
--      this generation not yet ended (the admin API's leased, what
--      spares a ban: a reset or an override drops held leases); others
--      go at the next grant
--   e  the latest lease end (µs), n the grant counter (a grant's id)
--   u, z  the units out as of e, and the last grant whose units are no
--      longer in u: kept for the previous release, which reads them
--   l, b  the events and capacity the latest lease was granted under
--   h<holder>  each holder's latest lease end: the holders that leased
--      within the last quota_lease share what is left
--   t<holder>  when an instance last took from the key without a lease
--      (a decision in Redis), written again once quota_lease old: a
--      leased answer's r allows for what the takers of the last two
--      quota_lease take meanwhile
--   r<holder>  the holder's grants given back whose give-back time is
--      not over, "<id>:<its last µs>," each: a give-back of one of them
--      does nothing (sent twice), one of any other grant lands in any
--      order (a holder's give-backs travel in separate calls, and a
--      grant it could not hold goes back before its earlier leases end);
--      at most quota_given_max of them: a give-back past that is refused
--      (it only costs admissions), so a give-back's work is bounded;
--      both go once the holder's leases are past any give-back
-- It expires quota_lease + 2 s after its latest lease ends, past any
-- give-back it accepts (before a lease's end + quota_lease +
-- give_back_grace), so a hash that expired and starts over (at a new
-- generation) meets none of its leases' give-backs.
-- A leasing zone replies with six more values, after a ban's: units
-- granted (0: none), the grant's end (without one: the latest end of the
-- live leases, else 0), the generation, the grant's id, the units out,
-- the instances that recently took from the key, leased or not (0: no
-- bookkeeping).

-- max_quota_lease is the longest quota_lease (algorithms.MaxQuotaLease,
-- µs): a holder's last lease that ended this long ago has no give-back
-- left to land, whatever its zone's quota_lease.
local max_quota_lease = 10000000

-- give_back_grace is how long past its lease's end + quota_lease a
-- give-back is still taken (algorithms.QuotaGiveBackGrace, µs): one sent
-- late by a busy instance (a reload's, a sweep's behind others) still
-- lands, instead of leaving its units counted until the window ends.
local give_back_grace = 1000000

-- q_vals holds a leasing request's reply values before they are packed
-- (decide.lua's pack).
local q_vals = {}

-- q_ holds a leasing request's zones' bookkeeping between deciding and
-- granting, reused by every request (as decide.lua's zone verdicts are).
local q_g, q_out, q_end, q_latest, q_id, q_zero, q_holders, q_takers, q_took, q_stale = {}, {}, {}, {}, {}, {}, {}, {}, {}, {}

-- lease_record is a grant's o<id> field: its end, units and generation.
local function lease_record(v)
  local e, units, g = string.match(v, '^(%d+),(%d+),(%d+)$')
  return tonum(e) or 0, tonum(units) or 0, tonum(g) or -1
end

-- lease_value is the o<id> field of a grant ending at e with units of
-- generation g.
local function lease_value(e, units, g)
  return int(e) .. ',' .. int(units) .. ',' .. int(g)
end

-- q_records holds quota_read's o<id> fields and values until it knows
-- the generation.
local q_records = {}

-- quota_read reads key's bookkeeping for a zone of quota_lease ql asked
-- by holder into the q_ arrays at i: its generation, units out and their
-- end at now, grant counter, the holders sharing it (the asker
-- included), every instance that recently took from it, and whether the
-- asker is one of them; it returns the events and capacity the units out were
-- granted under (nil when none are out).
local function quota_read(i, base, now, ql, holder)
  local m = rcall('HGETALL', base .. ':q')
  local g, live, live_end, e, n, z, l, b, holders, mine, stale = 0, 0, 0, 0, 0, 0, nil, nil, 0, false, nil
  local counted, takers, took = {}, 0, false -- the instances counted as takers, by name
  local me, taker = 'h' .. holder, 't' .. holder
  for j = 1, #m, 2 do
    local f, v = m[j], m[j + 1]
    local c = string.byte(f, 1)
    if f == 'g' then g = tonum(v)
    elseif f == 'e' then e = tonum(v)
    elseif f == 'n' then n = tonum(v)
    elseif f == 'z' then z = tonum(v)
    elseif f == 'l' then l = tonum(v)
    elseif f == 'b' then b = tonum(v)
    elseif c == 111 then -- 'o': a grant
      q_records[#q_records + 1], q_records[#q_records + 2] = f, v
    elseif c == 116 then -- 't': written again once ql old, counted for 2 ql: one taking all along stays counted
      local last = tonum(v)
      if last > now - 2 * ql then
        local name = string.sub(f, 2)
        if not counted[name] then counted[name], takers = true, takers + 1 end
        if f == taker and last > now - ql then took = true end
      elseif last + max_quota_lease + give_back_grace <= now then
        stale = stale or {}
        stale[#stale + 1] = f
      end
    elseif c == 104 then -- 'h'
      local last = tonum(v)
      if last > now - ql then
        local name = string.sub(f, 2)
        holders = holders + 1
        if not counted[name] then counted[name], takers = true, takers + 1 end
        if f == me then mine = true end
      elseif last + max_quota_lease + give_back_grace <= now then -- none of its give-backs can land: forget it
        stale = stale or {}
        stale[#stale + 1], stale[#stale + 2] = f, 'r' .. string.sub(f, 2)
      end
    end
  end
  if not mine then holders = holders + 1 end
  if not counted[holder] then takers = takers + 1 end
  for j = #q_records - 1, 1, -2 do
    local ends, units, of = lease_record(q_records[j + 1])
    if ends > now and of == g then
      live, live_end = live + units, math.max(live_end, ends)
    else
      stale = stale or {}
      stale[#stale + 1] = q_records[j]
    end
    q_records[j], q_records[j + 1] = nil, nil
  end
  if now >= e then e, z, l, b = 0, n, nil, nil end
  q_g[i], q_out[i], q_end[i], q_latest[i], q_id[i], q_zero[i], q_holders[i], q_stale[i] = g, live, live_end, e, n, z, holders, stale
  q_takers[i] = takers -- every recent taker, the asker included
  q_took[i] = took or mine or #m == 0 -- no bookkeeping: none to join
  return l, b
end

-- quota_units is what zone i may lease after a request left rem: its
-- ask, at most rem shared by twice the holders; 0 below 2.
local function quota_units(i, ask, rem)
  local units = math.min(ask, floor(rem / (2 * q_holders[i])))
  if units < 2 then return 0 end
  return units
end

-- quota_grant counts units of zone i for holder until e (the grant),
-- records it in the key's bookkeeping and sets the zone's remaining,
-- reset and more to what they are then (an algorithm's grant returns
-- those the units change: a token bucket's level rises by more than
-- them, a log's newest entry is the lease's); it returns the grant's id.
local function quota_grant(i, base, alg, key, now, events, window, burst, units, lease, e, ql, holder)
  local rem, reset, more = alg.grant(key, now, events, window, burst, units, lease, e)
  local _, was_rem, was_reset, was_more = zone_verdict(i)
  set_zone(i, rem or (was_rem - units), reset and math.max(was_reset, reset) or was_reset, more or was_more)
  local mk = base .. ':q'
  local out, last = q_out[i] + units, math.max(q_latest[i], e)
  local id = q_id[i] + 1
  if q_g[i] == 0 then q_g[i] = now end -- a first grant: above every generation a lost hash (FLUSHALL, a restart) gave out
  if q_stale[i] then rcall('HDEL', mk, unpack(q_stale[i])) end -- the holder's own too: set again below
  rcall('HSET', mk, 'g', q_g[i], 'u', out, 'e', last, 'n', id, 'z', q_zero[i], 'l', events, 'b', burst, 'h' .. holder, e,
    'o' .. int(id), lease_value(e, units, q_g[i]))
  local keep = keep_ms(ceil_div(last - now + ql + give_back_grace, 1000) + 1000)
  if rcall('PTTL', mk) < keep then rcall('PEXPIRE', mk, keep) end -- a reset's keeps longer
  q_out[i], q_end[i], q_latest[i], q_id[i] = out, math.max(q_end[i], e), last, id
  return id
end

-- in_force_quota is the limit a leasing zone decides by: with units out
-- granted under a smaller limit (l, b), that one (one limit per lease).
-- A zone with overrides applies it after its override (decide_zone
-- passes the leased limit on to decide.lua's in_force).
local function in_force_quota(events, burst, l, b)
  if l then return math.min(events, l), math.min(burst, b) end
  return events, burst
end

-- decide_leasing decides leasing request r of n zones (keys[k+1..]) at
-- now, as decide_request does, then, when it is admitted and consumed and
-- every zone asks for a lease (none a dry run), grants every zone its
-- lease or none (quota_units, and no lease ending sooner than its zone's
-- shortest). It returns its reply.
local function decide_leasing(keys, k, r, n, now, consume)
  local q, admit = r.q, true
  local ev, bu = {}, {}
  -- every zone's bookkeeping is read before anything is written: on a
  -- Cluster moving the slot, a read of a key already moved fails the
  -- request, which is then sent again as a whole (redisstore's slotMoving)
  local ll, lb = {}, {}
  for i = 1, n do
    local _, events, _, burst = zone_of(r, i)
    ev[i], bu[i] = events, burst
    if q[i] then
      ll[i], lb[i] = quota_read(i, state_base(keys[k + i]), now, q[i].ql, q[i].holder)
      ev[i], bu[i] = in_force_quota(ev[i], bu[i], ll[i], lb[i])
    end
  end
  for i = 1, n do
    local alg, _, window, _, cost, dry_run, lease, max_delay, over, ban = zone_of(r, i)
    admit = decide_zone(i, alg, keys[k + i], now, ev[i], window, bu[i], cost, dry_run, lease, max_delay, over, ban,
      consume, q[i] and q_out[i], ll[i], lb[i]) and admit
  end
  local commit = admit and consume
  local grant = commit
  for i = 1, n do
    local _, _, _, _, _, dry_run = zone_of(r, i)
    if commit then commit_zone(i) end
    grant = grant and q[i] and q[i].ask > 0 and dry_run ~= '1'
    local _, _, _, _, oe, ob = zone_verdict(i)
    if oe and oe > 0 then ev[i], bu[i] = in_force_quota(oe, ob, ll[i], lb[i]) end -- by its override
  end
  local units, ends = {}, {}
  if grant then
    for i = 1, n do
      local alg, _, window, _, _, _, lease = zone_of(r, i)
      local _, rem, _, _, oe = zone_verdict(i)
      units[i] = quota_units(i, q[i].ask, rem)
      ends[i] = alg.lease_end(now, window, lease, q[i].ql, ev[i], bu[i], units[i])
      if oe and oe > 0 then -- a lease never outlives the override it is granted under
        ends[i] = math.min(ends[i], override_end(keys[k + i]) or ends[i])
      end
      if units[i] == 0 or ends[i] - now < q[i].min then grant = false end
    end
  end
  local o = 0
  for i = 1, n do
    local granted, e, id = 0, q[i] and q_end[i], q[i] and q_id[i]
    if grant then
      local alg, _, window, _, _, _, lease = zone_of(r, i)
      id = quota_grant(i, state_base(keys[k + i]), alg, keys[k + i], now, ev[i], window, bu[i],
        units[i], lease, ends[i], q[i].ql, q[i].holder)
      granted, e = units[i], ends[i]
    end
    if q[i] and commit and not grant and not q_took[i] then
      -- a taker without a lease: the holders' answers allow for it
      rcall('HSET', state_base(keys[k + i]) .. ':q', 't' .. q[i].holder, now)
    end
    o = put_zone(q_vals, o, i)
    if q[i] then
      local takers = q_takers[i]
      if q_id[i] == 0 and granted == 0 then takers = 0 end -- no bookkeeping
      q_vals[o + 1], q_vals[o + 2], q_vals[o + 3], q_vals[o + 4], q_vals[o + 5], q_vals[o + 6] = granted, e, q_g[i], id, q_out[i], takers
      o = o + 6
    end
  end
  return pack(q_vals, o, now)
end

-- quota_given_max bounds a holder's grants given back whose give-back
-- time is not over (algorithms' quotaGivenMax is the twin).
local quota_given_max = 64

-- quota_given reads a holder's grants given back (its r field) at now:
-- whether grant id may still be given back (it is not among them, and
-- they are fewer than quota_given_max), and the field without those
-- whose give-back time is over (no give-back of theirs can land any more).
local function quota_given(field, id, now)
  local kept, seen = {}, false
  for g, last in string.gmatch(field or '', '(%d+):(%d+),') do
    if tonum(last) >= now then
      kept[#kept + 1] = g .. ':' .. last .. ','
      seen = seen or tonum(g) == id
    end
  end
  return not seen and #kept < quota_given_max, table.concat(kept)
end

-- give_back settles request r's give-backs (keys[k+1..]) at now: each
-- zone's unused units go back to the window, slot or entry of its grant
-- (the settlement's time; for an algorithm that stamps its lease with its
-- end, that end) only while the key's generation is the grant's and
-- before the lease's end + quota_lease + give_back_grace; for token_bucket only before the
-- lease's end and while no later grant was made; and only once per grant
-- (r<holder>), in whatever order the grants come back. Otherwise nothing.
-- The grant's units out (its o<id>, and u for the previous release)
-- shrink by them. It sets q_vals[i] to 1 for a zone given back (or a
-- plain settlement), 0 for one refused.
local function give_back(keys, k, r, n, now)
  for i = 1, n do
    q_vals[i] = 1
    local q, key = r.q[i], keys[k + i]
    local alg, events, window, burst, delta, at, lease = zone_of(r, i)
    at = tonum(at)
    if q then
      local e, id, holder = q.ends, q.id, q.holder
      local mk = state_base(key) .. ':q'
      local g, latest, out, given, record = unpack(rcall('HMGET', mk, 'g', 'n', 'u', 'r' .. holder, 'o' .. int(id)))
      local ok = g and tonum(g) == q.gen and now < e + q.ql + give_back_grace
      if ok and alg.lease_taken_at_end then ok = now < e and tonum(latest) == id end
      if ok then ok, given = quota_given(given, id, now) end
      if not ok then q_vals[i] = 0 end
      if ok then
        if alg.lease_at_end then at = e end
        alg.settle(key, now, at, events, window, burst, delta, lease)
        local mark = given .. int(id) .. ':' .. int(e + q.ql + give_back_grace - 1) .. ','
        if record then -- a live grant: its units out shrink by those given back
          local ends, units = lease_record(record)
          local u, left = math.max(0, (tonum(out) or 0) + delta), units + delta
          if left > 0 then
            rcall('HSET', mk, 'u', u, 'r' .. holder, mark, 'o' .. int(id), lease_value(ends, left, q.gen))
          else
            rcall('HSET', mk, 'u', u, 'r' .. holder, mark)
            rcall('HDEL', mk, 'o' .. int(id))
          end
        else
          rcall('HSET', mk, 'r' .. holder, mark)
        end
      end
    else
      alg.settle(key, now, at, events, window, burst, delta, lease)
    end
  end
end

-- decide_unleased decides request r at now as decide_plain does, for a
-- request r.unleased (request.lua) whose key has no lease bookkeeping:
-- the zone's six values are then all 0 (no grant, nothing out,
-- generation 0, no grant made, no takers), and nothing else would differ. A cold
-- key's decision costs one EXISTS more than without leases.
local function decide_unleased(key, r, now)
  local consume = r.mode == '1q'
  local v, retry, reset, more = plain_verdict(key, r, now, consume and r.alg.takes, consume)
  return spack('<ddddddddddd', v, retry, reset, more, 0, 0, 0, 0, 0, 0, now)
end

-- run_leasing is leasing request r's reply at now (its mode ends in
-- 'q'): a give-back's, or its verdicts.
local function run_leasing(keys, k, r, now)
  if r.unleased and rcall('EXISTS', state_base(keys[k + 1]) .. ':q') == 0 then
    return decide_unleased(keys[k + 1], r, now)
  end
  if r.mode == 'settleq' then
    give_back(keys, k, r, r.zones, now)
    return pack(q_vals, r.zones, now)
  end
  return decide_leasing(keys, k, r, r.zones, now, r.mode == '1q')
end
