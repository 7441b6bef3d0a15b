-- call: the decide call itself (decide_batch), which runs each request of
-- a batch (its format: the top of decide.lua) by its kind: a plain one
-- (decide.lua's decide_plain), a leasing one (quota_lease.lua's
-- run_leasing), a settlement or any other (decide.lua). It follows both
-- files, which never call into it.

-- run_request is request r's reply at now: its verdicts, or a
-- settlement's now alone.
local function run_request(keys, k, r, now)
  if r.err then error(r.err, 0) end
  if r.q then return run_leasing(keys, k, r, now) end
  if r.mode == 'settle' then
    settle_request(keys, k, r, r.zones, now)
    return spack('<d', now)
  end
  return decide_request(keys, k, r, r.zones, now, r.mode == '1')
end

-- error_reply is a failed request's reply: Redis's own error (it is
-- already one), or a Lua error's text.
local function error_reply(err)
  if type(err) == 'string' then return {err = 'ERR ' .. err} end
  return err
end

-- decide_batch decides a call's requests. A call of one request is the
-- common case when Redis is not busy: its reply is that request's, and its
-- error the call's (with no neighbour to spare, it needs no pcall, which
-- costs Redis about as much as a GET). Its plain request that takes is
-- decided right here, as decide_plain does, written out: each Lua call it
-- saves is a measurable part of the call's cost.
local function decide_batch(keys, argv)
  if not rcall then rcall, spack, sunpack, floor, tonum = redis.call, struct.pack, struct.unpack, math.floor, tonumber end
  local s = argv[1]
  if s and not argv[2] then
    local r = parsed[s] or parse(s)
    local now = r.now
    if now then
      time_now = nil
    else
      now = redis_now()
      time_now = now
    end
    if r.take then
      local ok, rem, retry, reset, more = r.alg.decide(keys[1], now, r.events, r.window, r.burst, r.cost, r.slot, r.max_delay, true)
      return plain_reply(2 * rem + (ok and 1 or 0), retry, reset, more, now)
    end
    if r.plain then return decide_plain(keys[1], r, now) end
    return run_request(keys, 0, r, now)
  end
  local n, k, clock = #argv, 0, nil
  local out, failed, r = {}, false, nil
  for i = 1, n do
    local s = argv[i]
    if s ~= '' or not r then r = parsed[s] or parse(s) end -- '': the request before's again
    local now = r.now
    if not now then
      clock = clock or redis_now()
      now = clock
    end
    time_now = (not r.now) and now or nil
    local ok, res, rem, retry, reset, more -- one request's failure is its own: pcall
    if r.take then -- decide_plain, written out
      ok, res, rem, retry, reset, more = pcall(r.alg.decide, keys[k + 1], now, r.events, r.window, r.burst, r.cost, r.slot, r.max_delay, true)
      if ok then res = plain_reply(2 * rem + (res and 1 or 0), retry, reset, more, now) end
    elseif r.plain then
      ok, res = pcall(decide_plain, keys[k + 1], r, now)
    else
      ok, res = pcall(run_request, keys, k, r, now)
    end
    if not ok then res, failed = error_reply(res), true end
    out[i] = res
    k = k + r.zones
  end
  if failed then return out end
  return table.concat(out)
end
