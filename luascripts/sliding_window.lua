-- sliding_window: a slotted window that never admits more than `events` in
-- any trailing window. The window is cut into sw_slots slots aligned to the
-- epoch of Redis TIME; the events of a slot count whole until the slot has
-- left the window (its end + window), so the only error is a refusal at
-- most one slot (window / sw_slots, rounded up to a µs) late.
-- algorithms/sliding_window.go's SlidingWindowSlots says why 20.
-- State: little-endian doubles (exact: every value is an integer below
-- 2^53): the running total of the stored slots, then per slot used its end
-- (µs) and the count taken in it (> 0), oldest first: '<d' .. n × '<dd',
-- 8 + 16n bytes, n <= sw_slots + 1. Kept until the newest slot leaves.
-- Slots are dropped from the front as they leave, so a decision reads the
-- total, the newest slot and the slots leaving: O(1) amortized.
-- Earlier releases stored a weighted two-window counter at ":v2" keys, and
-- before that as text without a suffix (algorithms/state_format.go).
algorithms.sliding_window = {}

local sw_slots = 20

-- sw_valid is whether v is a state: a total and at least one slot.
local function sw_valid(v)
  local n = #v
  return n >= 24 and n % 16 == 8
end

-- sw_need is the end of the slot at which `need` units of v's slots from
-- byte `first` on have left.
local function sw_need(v, first, need)
  local last = #v - 15
  while first < last do
    local e, c = struct.unpack('<dd', v, first)
    need = need - c
    if need <= 0 then return e end
    first = first + 16
  end
  return (struct.unpack('<d', v, last))
end

function algorithms.sliding_window.decide(key, now, events, window, burst, cost)
  local l = math.floor((window + sw_slots - 1) / sw_slots)
  local add = (math.floor(now / l) + 1) * l -- the end of now's slot
  local v = redis.call('GET', key)
  if not (v and sw_valid(v)) then
    local reset = add + window - now
    if cost <= events then
      return true, events, 0, 0, 0, reset, reset, struct.pack('<ddd', cost, add, cost), reset
    end
    return false, events, window, 0, 0, reset, reset
  end
  local last = #v - 15
  local e, c = struct.unpack('<dd', v, last)
  if e + window <= now then -- every slot has left
    local reset = add + window - now
    if cost <= events then
      return true, events, 0, 0, 0, reset, reset, struct.pack('<ddd', cost, add, cost), reset
    end
    return false, events, window, 0, 0, reset, reset
  end
  local total, first = struct.unpack('<d', v)
  local oe, oc = struct.unpack('<dd', v, first)
  while oe + window <= now do -- drop the slots that left
    total, first = total - oc, first + 16
    oe, oc = struct.unpack('<dd', v, first)
  end
  if e > add then add = e end -- the clock went back: count in the newest
  local reset, more = e + window - now, oe + window - now
  local reset_after = add + window - now
  local remaining = math.max(0, events - total)
  if total + cost <= events then
    if add == e then
      -- the same slot: its expiry (the slot's end + window) stays
      return true, remaining, 0, reset, more, reset_after, more,
        struct.pack('<d', total + cost) .. string.sub(v, first, #v - 8) .. struct.pack('<d', c + cost), false
    end
    return true, remaining, 0, reset, more, reset_after, more,
      struct.pack('<d', total + cost) .. string.sub(v, first) .. struct.pack('<dd', add, cost), reset_after
  end
  if cost > events then return false, remaining, window, reset, more, reset_after, more end
  return false, remaining, sw_need(v, first, total + cost - events) + window - now, reset, more,
    reset_after, more
end

-- commit stores the new state, kept until its newest slot leaves: for ttl
-- µs, or (ttl false: the same newest slot) as long as the slot's first
-- write set. SET KEEPTTL costs Redis half of SET PX, which takes the old
-- expiry out of its table and puts the new one in.
function algorithms.sliding_window.commit(key, state, ttl)
  if ttl then
    save(key, state, ttl)
  else
    redis.call('SET', key, state, 'KEEPTTL')
  end
end

-- settle changes the count of the slot the reservation was taken in (at)
-- by `delta`, while that slot is stored; a slot whose count drops to 0 is
-- removed, and a debt is at most one more limit per slot.
function algorithms.sliding_window.settle(key, now, at, events, window, burst, delta)
  local v = redis.call('GET', key)
  if not (v and sw_valid(v)) then return end
  local l = math.floor((window + sw_slots - 1) / sw_slots)
  local slot = (math.floor(at / l) + 1) * l
  local p = #v - 15
  while p > 8 do
    local e, c = struct.unpack('<dd', v, p)
    if e == slot then
      local n = math.min(math.max(0, c + delta), 2 * events)
      local total = struct.unpack('<d', v) + n - c
      if n > 0 then
        v = struct.pack('<d', total) .. string.sub(v, 9, p + 7) .. struct.pack('<d', n) .. string.sub(v, p + 16)
      elseif #v == 24 then
        redis.call('DEL', key)
        return
      else
        v = struct.pack('<d', total) .. string.sub(v, 9, p - 1) .. string.sub(v, p + 16)
      end
      redis.call('SET', key, v, 'KEEPTTL')
      return
    end
    if e < slot then return end
    p = p - 16
  end
end
