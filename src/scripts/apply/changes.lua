-- apply/changes.lua: on boards with notify_top = N, what each event of the
-- call did to the top N of each period it moved (between phase 2, which
-- decided the values in event order, and phase 3, which writes them).
--
-- A change is one event moving its player up into or inside the top N of a
-- period: { i, period id, old rank (0: outside the top N), new rank, the
-- stored score, the player pushed out of the top N ("": none), the players
-- passed }. Ranks are ordinal in the board's order (the stored score, then
-- the member's bytes, as ZREVRANK or ZRANK answer). The passed are the
-- players who stood above the mover inside the top N before and below it
-- after, nearest to its new rank first, at most PASSED.
--
-- How: a period's top is read once per call and the call's moves of it
-- (A.trans[j], in event order) are played on that copy. What is read is the
-- top N + 1 + d, d the moves that worsen a value ("latest" boards, negative
-- sums). Every member outside the copy ranks below its last entry; only a
-- move that falls below that entry leaves the copy, uncovering one place,
-- so the first N + 1 places stay exact through the call.
--
-- Each event's changes are remembered under "<changes><field>:<offset>"
-- (EX dedupe ttl, like refusals), and a redelivered record answers them
-- again (A.redone), so that a record redelivered after a crash produces
-- the same changes.

local ApplyChanges = {}
do
  local call, byte, min, floor, format = redis.call, string.byte, math.min, math.floor, string.format
  local PASSED = 10

  -- Whether a's member bytes sort after b's (Lua's own string comparison
  -- follows the locale; Redis orders by bytes).
  local function bytes_after(a, b)
    if a == b then return false end
    local la, lb = #a, #b
    for k = 1, min(la, lb) do
      local x, y = byte(a, k), byte(b, k)
      if x ~= y then return x > y end
    end
    return la > lb
  end

  -- Whether (sa, na) ranks above (sb, nb) in the board's order.
  local function above_fn(desc)
    if desc then
      return function(sa, na, sb, nb)
        if sa ~= sb then return sa > sb end
        return bytes_after(na, nb)
      end
    end
    return function(sa, na, sb, nb)
      if sa ~= sb then return sa < sb end
      return bytes_after(nb, na)
    end
  end

  -- The top of period key k as arrays S (stored scores) and M (members),
  -- best first, up to `want` places; whole: that is the whole board.
  local function read_top(k, want, desc)
    local got
    if desc then
      got = call('ZRANGE', k, 0, want - 1, 'REV', 'WITHSCORES')
    else
      got = call('ZRANGE', k, 0, want - 1, 'WITHSCORES')
    end
    local S, M, at = {}, {}, {}
    for x = 2, #got, 2 do
      local n = x / 2
      M[n], S[n] = got[x - 1], got[x] + 0
      at[got[x - 1]] = true
    end
    return S, M, at, #got / 2 < want
  end

  -- The first place whose entry (s, n) ranks above, among the first len.
  local function place(S, M, len, above, s, n)
    local lo, hi = 1, len + 1
    while lo < hi do
      local mid = floor((lo + hi) / 2)
      if above(s, n, S[mid], M[mid]) then hi = mid else lo = mid + 1 end
    end
    return lo
  end

  -- Plays period j's moves; adds each change to by_event[i].
  local function play(A, j, moves, by_event)
    local N, desc, members = A.h.notify, A.h.desc, A.members
    local above = above_fn(desc)
    -- Whether (sa, na) does not rank below (sb, nb): finds an entry's own place.
    local function not_below(sa, na, sb, nb) return not above(sb, nb, sa, na) end
    local d = 0
    for _, mv in ipairs(moves) do
      local old, new = mv[4], mv[5]
      if old and above(old, '', new, '') then d = d + 1 end
    end
    local cap = N + 1 + d
    local S, M, at, whole = read_top(A.pk[j], cap, desc)
    local period = A.h.periods[j].id
    for _, mv in ipairs(moves) do
      local i, name, old, new = mv[1], members[mv[3]], mv[4], mv[5]
      local len = #M
      local from
      if at[name] then
        -- Its entry is the first that does not rank above (old, name).
        from = place(S, M, len, not_below, old, name)
        if M[from] ~= name then
          -- Cannot happen (the copy holds the scores phase 1 read); a
          -- script must not fail once it has written, so look it up.
          for p = 1, len do
            if M[p] == name then from = p end
          end
        end
        table.remove(S, from)
        table.remove(M, from)
        at[name] = nil
        len = len - 1
      end
      local to = place(S, M, len, above, new, name)
      if to <= len or whole then
        table.insert(S, to, new)
        table.insert(M, to, name)
        at[name] = true
        if to <= N and (not from or from > N or to < from) then
          local was_in = from and from <= N
          local last = was_in and from or min(N + 1, len + 1)
          local passed = {}
          for p = to + 1, min(last, to + PASSED) do passed[#passed + 1] = M[p] end
          local pushed = ''
          if not was_in and M[N + 1] then pushed = M[N + 1] end
          local list = by_event[i] or {}
          list[#list + 1] = { i, period, was_in and from or 0, to, new, pushed, passed }
          by_event[i] = list
        end
        if #M > cap then
          at[M[#M]] = nil
          S[#S], M[#M] = nil, nil
          whole = false
        end
      end
    end
  end

  -- The call's changes, as one MessagePack array in event order (nil for
  -- none); remembers each event's.
  function ApplyChanges.run(A)
    local h, by_event = A.h, {}
    for j = 1, A.np do
      local moves = A.trans[j]
      if moves and #moves > 0 then play(A, j, moves, by_event) end
    end
    local out = {}
    for i = 1, A.ne do
      local list = by_event[i]
      local pos = A.pos[i]
      if list and pos then
        call('SET', h.changes .. h.fields[pos[1]] .. ':' .. format('%d', pos[2]), cmsgpack.pack(list), 'EX', h.ttl)
      end
      local again = A.redone[i]
      if again then
        local got = call('GET', h.changes .. h.fields[again[1]] .. ':' .. format('%d', again[2]))
        if got then
          list = cmsgpack.unpack(got)
          for _, c in ipairs(list) do c[1] = i end
        end
      end
      if list then
        for _, c in ipairs(list) do out[#out + 1] = c end
      end
    end
    if #out == 0 then return nil end
    return cmsgpack.pack(out)
  end
end
