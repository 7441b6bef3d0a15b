-- request: reading a request's string, the one argument of the decide
-- call per request (its format is described at the top of decide.lua).
-- The strings a zone sends repeat from request to request: each is read
-- once and remembered.
local ZONE_ARGS = 8

-- overridable, the algorithm fields of zones with overrides (each name
-- with ':o'), is written out before this file by luascripts.Compose,
-- from the algorithms it composes.

-- banning holds the zones with a ban met so far: name → {alg, over,
-- ban} (see ban_zone); cleared when it grows past a few hundred names.
local banning, banning_n = {}, 0

-- ban_zone reads an algorithm argument with a ban: its algorithm, whether
-- it has overrides, and its ban in µs.
local function ban_zone(name)
  local z = banning[name]
  if z then return z.alg, z.over, z.ban end
  local base, secs = string.match(tostring(name), '^(.-):b(%d+)$')
  local alg, over = base and algorithms[base], false
  if base and not alg then alg, over = overridable[base], true end
  if not alg then error('unknown algorithm ' .. tostring(name)) end
  if banning_n >= 256 then banning, banning_n = {}, 0 end
  banning[name], banning_n = {alg = alg, over = over, ban = tonum(secs) * 1000000}, banning_n + 1
  return alg, over, tonum(secs) * 1000000
end

-- resolve reads an algorithm field: the algorithm, whether it has
-- overrides, and its ban in µs (nil for none); nil for an unknown name.
local function resolve(name)
  local alg = algorithms[name]
  if alg then return alg, false, nil end
  alg = overridable[name]
  if alg then return alg, true, nil end
  if not string.find(name, ':b', 1, true) then return nil end
  local ok, a, over, ban = pcall(ban_zone, name)
  if ok then return a, over, ban end
  return nil
end

-- parse_quota reads the quota lease fields of a leasing request (its mode
-- ends in 'q'), one per zone after the zones' own from f[at + 1]: "0" for
-- a zone that does not lease, else its fields joined by commas. It
-- returns a record by zone (false for a zone that does not lease): in a
-- decision (ask) {ql, ask, min, holder}: its quota_lease (µs), the units
-- asked, the shortest lease worth having (µs) and the holder's name; in a
-- give-back {ql, gen, id, ends, holder}: its quota_lease, the grant's
-- generation, id and end (µs), and the holder's name.
local function parse_quota(f, at, zones, give_back)
  local q = {}
  for i = 1, zones do
    local s = f[at + i]
    if give_back then
      local ql, gen, id, ends, holder = string.match(s, '^(%d+),(%d+),(%d+),(%d+),(.+)$')
      q[i] = ql and {ql = num(ql), gen = num(gen), id = num(id), ends = num(ends), holder = holder} or false
    else
      local ql, ask, min, holder = string.match(s, '^(%d+),(%d+),(%d+),(.+)$')
      q[i] = ql and {ql = num(ql), ask = num(ask), min = num(min), holder = holder} or false
    end
  end
  return q
end

-- A parsed request is a record: mode, now (false for Redis TIME) and
-- zones (their count); err when it cannot be read; q, a leasing
-- request's quota records (parse_quota); plain on a request of one zone
-- without override or ban that consumes or looks (decide_plain); take on
-- a plain one that consumes with an algorithm that takes (see takes in
-- decide.lua); unleased (see parse). Its zones' values are its array
-- part, ZONE_VALUES per zone, read only by zone_of. A request of one zone
-- also names that zone's values the hot paths read (alg, events, window,
-- burst, cost, slot, max_delay): a zone_of call saved there is a
-- measurable part of a call's cost.
local ZONE_VALUES = 10

-- zone_of is zone i of parsed request r, unpacked: its algorithm, events,
-- window, burst, cost, dry run ("1" or "0"; a settlement's reservation
-- time), slot, max_delay, overrides and ban (µs or nil).
local function zone_of(r, i)
  local b = (i - 1) * ZONE_VALUES
  return r[b + 1], r[b + 2], r[b + 3], r[b + 4], r[b + 5], r[b + 6], r[b + 7], r[b + 8], r[b + 9], r[b + 10]
end

-- parsed remembers the requests parsed so far by their strings: a zone's
-- requests send the same string again and again (now "", the same cost),
-- and a table lookup costs a fraction of splitting it and reading its
-- numbers. Requests that are unique anyway (a given now, a settlement, a
-- slot of an in_flight algorithm) are not kept. It starts over past
-- parsed_max entries.
local parsed, parsed_n, parsed_max = {}, 0, 1024

-- parse reads the request string s (see the top of this file).
local function parse(s)
  local r = parsed[s]
  if r then return r end
  local f, pos, n = {}, 1, 0
  while true do
    local e = string.find(s, ' ', pos, true)
    n = n + 1
    if not e then
      f[n] = string.sub(s, pos)
      break
    end
    f[n] = string.sub(s, pos, e - 1)
    pos = e + 1
  end
  local mode, zones = f[1], tonum(f[3]) or 0
  r = {mode = mode, now = tonum(f[2]) or false, zones = zones}
  local keep = f[2] == '' and mode ~= 'settle' and mode ~= 'settleq'
  local leasing = string.byte(mode, -1) == 113 -- a mode ending in 'q': see quota_lease.lua
  if n ~= 3 + zones * ZONE_ARGS + (leasing and zones or 0) then
    r.err, keep = 'bad request ' .. s, false
  elseif leasing then
    r.q = parse_quota(f, 3 + zones * ZONE_ARGS, zones, mode == 'settleq')
  end
  local simple = true -- no zone has an override or a ban
  for i = 0, zones - 1 do
    local a, b = 4 + i * ZONE_ARGS, i * ZONE_VALUES
    local alg, over, ban = resolve(f[a] or '')
    if not alg then
      r.err, keep = r.err or ('unknown algorithm ' .. tostring(f[a])), false
    elseif alg.in_flight then
      keep = false
    end
    local e, w, bu, c, d = f[a + 1], f[a + 2], f[a + 3], f[a + 4], f[a + 7]
    r[b + 1], r[b + 2], r[b + 3], r[b + 4], r[b + 5] = alg, e and num(e), w and num(w), bu and num(bu), c and num(c)
    r[b + 6], r[b + 7], r[b + 8], r[b + 9], r[b + 10] = f[a + 5], f[a + 6], d and num(d), over, ban
    simple = simple and not over and not ban
  end
  local one = zones == 1 and simple and not r.err
  if one then
    local _
    r.alg, r.events, r.window, r.burst, r.cost, _, r.slot, r.max_delay = zone_of(r, 1)
  end
  r.plain = one and not leasing and mode ~= 'settle'
  -- unleased: a leasing request of one zone without override or ban
  -- asking no lease (quota_lease.lua decides it as plain when its key
  -- has no lease bookkeeping)
  r.unleased = one and leasing and mode ~= 'settleq' and r.q[1] and r.q[1].ask == 0
  r.take = r.plain and mode == '1' and r.alg.takes
  if keep then
    if parsed_n >= parsed_max then parsed, parsed_n = {}, 0 end
    parsed[s], parsed_n = r, parsed_n + 1
  end
  return r
end

