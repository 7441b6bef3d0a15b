-- sliding_window: a slotted window that never admits more than `events` in
-- any trailing window. The window is cut into sw_slots slots aligned to the
-- epoch of Redis TIME; the events of a slot count whole until the slot has
-- left the window (its end + window), so the only error is a refusal at
-- most one slot (window / sw_slots, rounded up to a µs) late.
-- algorithms/sliding_window.go's SlidingWindowSlots says why 20.
-- State: little-endian doubles (exact: every value is an integer below
-- 2^53): the running total of the stored slots, the newest slot's end (µs)
-- and the count taken in it (> 0), then the older slots in use as (end,
-- count) pairs, oldest first: '<ddd' .. (n - 1) × '<dd', 8 + 16n bytes for
-- n slots, n <= sw_slots + 1. Kept until the newest slot leaves. A request
-- in the newest slot rewrites only the first 24 bytes (SETRANGE, which
-- keeps the expiry); older slots are dropped from the front as they leave,
-- so a decision reads the header and the slots leaving: O(1) amortized.
-- Earlier releases stored a weighted two-window counter at ":v2" keys, and
-- before that as text without a suffix (algorithms/state_format.go).
algorithms.sliding_window = {takes = true}

local sw_slots = 20

-- sw_valid is whether v is a state: a total and at least one slot.
local function sw_valid(v)
  local n = #v
  return n >= 24 and n % 16 == 8
end

-- sw_first remembers by slot end the state of a key's first unit with
-- nothing older counted (total 1, in that slot): every such key stores the
-- same 24 bytes, and a table lookup costs a fraction of struct.pack.
local sw_first = {}

-- sw_need is the end of the slot at which `need` units of v's slots have
-- left: the older ones from byte `first` on, then the newest (e, c).
local function sw_need(v, first, e, need)
  local n = #v
  while first < n do
    local oe, oc = sunpack('<dd', v, first)
    need = need - oc
    if need <= 0 then return oe end
    first = first + 16
  end
  return e
end

function algorithms.sliding_window.decide(key, now, events, window, burst, cost, _, _, take)
  local l = window + sw_slots - 1
  l = (l - l % sw_slots) / sw_slots -- floor, without a call: exact (see ceil_div)
  local add = now - now % l + l -- the end of now's slot
  local v = rcall('GET', key)
  local total, e, c
  if v and sw_valid(v) then total, e, c = sunpack('<ddd', v) end
  if not e or e + window <= now then -- no slot in the window (none stored, or every one has left)
    local reset = add + window - now
    if cost <= events then
      local state
      if cost == 1 then state = sw_first[add] or remember(sw_first, add, spack('<ddd', 1, add, 1))
      else state = spack('<ddd', cost, add, cost) end
      if take then -- commit, written out (see takes in decide.lua)
        save_until(key, state, reset)
        return true, events - cost, 0, reset, reset
      end
      return true, events, 0, 0, 0, reset, reset, state, reset
    end
    return false, events, window, 0, 0, reset, reset
  end
  local oe, first, n = e, 25, #v
  if n > 24 then
    local oc
    oe, oc = sunpack('<dd', v, 25)
    while oe + window <= now do -- drop the older slots that left
      total, first = total - oc, first + 16
      if first > n then
        oe = e
        break
      end
      oe, oc = sunpack('<dd', v, first)
    end
  end
  if e > add then add = e end -- the clock went back: count in the newest
  local reset, more = e + window - now, oe + window - now
  local remaining = math.max(0, events - total)
  if total + cost <= events then
    if add ~= e then -- a new newest slot; the old one joins the older
      local state, ttl = spack('<ddd', total + cost, add, cost) .. string.sub(v, first) .. spack('<dd', e, c),
        add + window - now
      if take then
        save_until(key, state, ttl)
        return true, remaining - cost, 0, ttl, more
      end
      return true, remaining, 0, reset, more, ttl, more, state, ttl
    end
    local head = spack('<ddd', total + cost, e, c + cost)
    -- the same newest slot keeps its expiry: only the header changes,
    -- unless older slots were dropped
    if first == 25 then
      if take then
        rcall('SETRANGE', key, 0, head)
        return true, remaining - cost, 0, reset, more
      end
      return true, remaining, 0, reset, more, reset, more, head, true
    end
    if take then
      rcall('SET', key, head .. string.sub(v, first), 'KEEPTTL')
      return true, remaining - cost, 0, reset, more
    end
    return true, remaining, 0, reset, more, reset, more, head .. string.sub(v, first), false
  end
  if cost > events then return false, remaining, window, reset, more, add + window - now, more end
  return false, remaining, sw_need(v, first, e, total + cost - events) + window - now, reset, more,
    add + window - now, more
end

-- commit stores the new state: for ttl µs (a new newest slot, kept until
-- it leaves); or, in the same newest slot, as long as its first write set:
-- (ttl true) its header, with SETRANGE, or (ttl false) all of it, with SET
-- KEEPTTL. Both cost Redis less than SET PX, which takes the old expiry
-- out of its table and puts the new one in.
function algorithms.sliding_window.commit(key, state, ttl)
  if ttl == true then
    rcall('SETRANGE', key, 0, state)
  elseif ttl then
    save_until(key, state, ttl)
  else
    rcall('SET', key, state, 'KEEPTTL')
  end
end

-- settle changes the count of the slot the reservation was taken in (at)
-- by `delta`, while that slot is stored; a slot whose count drops to 0 is
-- removed (the last older slot becomes the newest), and a debt is at most
-- one more limit per slot.
function algorithms.sliding_window.settle(key, now, at, events, window, burst, delta)
  local v = rcall('GET', key)
  if not (v and sw_valid(v)) then return end
  local l = floor((window + sw_slots - 1) / sw_slots)
  local slot = (floor(at / l) + 1) * l
  local total, e, c = sunpack('<ddd', v)
  if e == slot then
    local n = settled(c, delta, events)
    total = total + n - c
    if n > 0 then
      rcall('SETRANGE', key, 0, spack('<ddd', total, e, n))
    elseif #v == 24 then
      rcall('DEL', key)
    else
      local le, lc = sunpack('<dd', v, #v - 15)
      rcall('SET', key, spack('<ddd', total, le, lc) .. string.sub(v, 25, #v - 16), 'KEEPTTL')
    end
    return
  end
  local p = #v - 15
  while p >= 25 do
    local oe, oc = sunpack('<dd', v, p)
    if oe == slot then
      local n = settled(oc, delta, events)
      local head = spack('<ddd', total + n - oc, e, c)
      if n > 0 then
        v = head .. string.sub(v, 25, p + 7) .. spack('<d', n) .. string.sub(v, p + 16)
      else
        v = head .. string.sub(v, 25, p - 1) .. string.sub(v, p + 16)
      end
      rcall('SET', key, v, 'KEEPTTL')
      return
    end
    if oe < slot then return end
    p = p - 16
  end
end

-- lease_end is the end of a quota lease granted at now (quota_lease.lua):
-- at most ql, and no later than now's slot, in which its units count.
function algorithms.sliding_window.lease_end(now, window, _, ql)
  local l = window + sw_slots - 1
  l = (l - l % sw_slots) / sw_slots
  return math.min(now + ql, now - now % l + l)
end

-- grant counts a lease's units in now's slot, as a request of that cost
-- (which fits: the caller leases no more than remains).
function algorithms.sliding_window.grant(key, now, events, window, burst, units)
  algorithms.sliding_window.decide(key, now, events, window, burst, units, nil, nil, true)
end
