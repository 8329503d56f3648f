-- apply/gain.lua: gain_over's windows (see rules.lua) for one apply call.
--
-- Gain windows: the tag's gain hash maps each member to its applied
-- (ts, delta) pairs, each two little-endian 8-byte integers (struct: a
-- fraction of what cmsgpack.pack costs for numbers of a timestamp's size,
-- measured in the script), read once per call (HMGET) and written
-- once per call (one variadic HSET of the members whose window moved),
-- pairs older than two windows before the member's newest dropped (an event
-- more than a window out of order may then miss some, as the rate limit's
-- window does). Each call also walks a few more fields (HSCAN, its cursor
-- kept in the field SWEEP, which no player id can be) and drops the
-- windows whose newest pair is two windows older than the call's newest
-- event: the hash holds the players of the last two windows, not every
-- player ever; it expires two windows and a day after the last write.

local ApplyGain = {}
do
  local call, min, format, rep = redis.call, math.min, string.format, string.rep
  local spack, sunpack = struct.pack, struct.unpack
  local CHUNK = Calls.CHUNK
  local SWEEP, SWEEP_COUNT = '\1sweep', 16
  -- No window yet: shared, never written (g.applied copies it first).
  local NONE = {}

  -- The struct format of n values, made once per n.
  local formats = {}
  local function format_of(n)
    local f = formats[n]
    if not f then
      f = '<' .. rep('i8', n)
      formats[n] = f
    end
    return f
  end

  -- Values a struct call takes or gives at a time (Lua's C stack).
  local PART = 2000

  -- A window's flat list of (ts, delta) pairs from its stored value.
  local function decode(v)
    local n = #v / 8
    if n == 0 then return NONE end
    if n <= PART then
      local list = { sunpack(format_of(n), v) }
      list[n + 1] = nil -- struct.unpack's last value: the next position
      return list
    end
    local list = {}
    for s = 1, n, PART do
      local k = min(PART, n - s + 1)
      local part = { sunpack(format_of(k), v, (s - 1) * 8 + 1) }
      for x = 1, k do list[s + x - 1] = part[x] end
    end
    return list
  end

  -- A window's stored value.
  local function encode(list)
    local n = #list
    if n <= PART then return spack(format_of(n), unpack(list)) end
    local parts = {}
    for s = 1, n, PART do
      local e = min(s + PART - 1, n)
      parts[#parts + 1] = spack(format_of(e - s + 1), unpack(list, s, e))
    end
    return table.concat(parts)
  end

  -- The newest time of a flat list of (ts, delta) pairs.
  local function newest_of(list)
    local newest = -math.huge
    for x = 1, #list, 2 do
      if list[x] > newest then newest = list[x] end
    end
    return newest
  end

  -- list without its pairs at or before oldest (list itself when none is).
  local function pruned(list, oldest)
    for x = 1, #list, 2 do
      if list[x] <= oldest then
        local kept = {}
        for y = 1, #list, 2 do
          if list[y] > oldest then kept[#kept + 1] = list[y]; kept[#kept + 1] = list[y + 1] end
        end
        return kept
      end
    end
    return list
  end

  -- The windows of A's members in the hash key (HMGET per CHUNK), for a
  -- window of window ms.
  function ApplyGain.open(A, key, window)
    local members, nm, win = A.members, A.nm, {}
    for s = 1, nm, CHUNK do
      local e = min(s + CHUNK - 1, nm)
      local got = call('HMGET', key, unpack(members, s, e))
      for x = s, e do
        local v = got[x - s + 1]
        win[x] = v and decode(v) or NONE
      end
    end
    local moved, moved_name = {}, {}
    local g = {}

    -- Member m's applied total in (ts - window, ts].
    function g.total(m, ts)
      local list, total = win[m], 0
      for x = 1, #list, 2 do
        local t = list[x]
        if t > ts - window and t <= ts then total = total + list[x + 1] end
      end
      return total
    end

    -- Member m's event (time ts, delta num) was applied.
    function g.applied(m, ts, num)
      local list = win[m]
      if list == NONE then
        list = {}
        win[m] = list
      end
      local n = #list
      list[n + 1], list[n + 2] = ts, num
      if not moved[m] then moved[m], moved_name[members[m]] = true, true end
    end

    -- The moved windows, pruned, in one HSET; the sweep; the expiry.
    function g.flush()
      local fields, newest_all = {}, -math.huge
      for m in pairs(moved) do
        local newest = newest_of(win[m])
        if newest > newest_all then newest_all = newest end
        fields[#fields + 1] = members[m]
        fields[#fields + 1] = encode(pruned(win[m], newest - 2 * window))
      end
      if #fields == 0 then return end
      local page = call('HSCAN', key, call('HGET', key, SWEEP) or '0', 'COUNT', SWEEP_COUNT)
      local stale, got = {}, page[2]
      for x = 1, #got, 2 do
        local name = got[x]
        if name ~= SWEEP and not moved_name[name] and newest_of(decode(got[x + 1])) <= newest_all - 2 * window then
          stale[#stale + 1] = name
        end
      end
      Calls.variadic('HDEL', key, stale, 1)
      fields[#fields + 1], fields[#fields + 2] = SWEEP, page[1]
      Calls.variadic('HSET', key, fields, 2)
      call('PEXPIRE', key, format('%d', 2 * window + 86400000))
    end

    return g
  end
end
