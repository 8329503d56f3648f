-- apply/changes.lua: on boards with notify_top = N, what each event of the
-- call did to the top N of each period it moved (between phase 2, which
-- decided the values in event order, and phase 3, which writes them).
--
-- A change is one event moving its player up into or inside the top N of a
-- period: { i, period id, old rank (0: outside the top N), new rank, the
-- stored score (on boards ranked by several columns, the stored row), the
-- player pushed out of the top N ("": none), the players passed }. Ranks are ordinal in the board's order (the stored score, then
-- the member's bytes, as ZREVRANK or ZRANK answer). The passed are the
-- players who stood above the mover inside the top N before and below it
-- after, nearest to its new rank first, at most PASSED.
--
-- How: a period's top is read once per call and the call's moves of it
-- (A.trans[j], in event order) are played on that copy. What is read is the
-- top N + 1 + d, d the moves that worsen a value ("latest" boards, negative
-- sums). Every member outside the copy ranks below its last entry; only a
-- move that falls below that entry leaves the copy, uncovering one place,
-- so the first N + 1 places stay exact through the call. A call none of
-- whose moves passes that last entry cannot change the top N, and reads
-- only the entry (most calls, on a large board).
--
-- Each event's changes are remembered under "<changes><field>:<offset>"
-- (EX dedupe ttl, like refusals), and a redelivered record answers them
-- again (A.redone), so that a record redelivered after a crash produces
-- the same changes.

local ApplyChanges = {}
do
  local call, min, format, before = redis.call, math.min, string.format, Members.before
  local PASSED = 10

  -- The copy holds each score times sg (1 on "desc" boards, -1 on "asc"
  -- ones), so that the better score is the greater everywhere; among equal
  -- scores, member bytes decide, descending on "desc" boards (as ZREVRANK),
  -- ascending on "asc" ones (as ZRANK).

  -- The top of period key k, best first, up to `want` places: S (scores
  -- times sg), M (members), at (member -> true); whole: the whole board.
  local function read_top(k, want, sg)
    local got
    if sg > 0 then
      got = call('ZRANGE', k, 0, want - 1, 'REV', 'WITHSCORES')
    else
      got = call('ZRANGE', k, 0, want - 1, 'WITHSCORES')
    end
    local S, M, at = {}, {}, {}
    local n = 0
    for x = 2, #got, 2 do
      n = n + 1
      M[n], S[n] = got[x - 1], sg * got[x]
      at[got[x - 1]] = true
    end
    return S, M, at, n < want, n
  end

  -- Whether (s, n) ranks above the copy's entry at p.
  local function above(S, M, p, s, n, desc)
    local sp = S[p]
    return s > sp or (s == sp and before(n, M[p], desc))
  end

  -- The first place among the first len whose entry (s, n) ranks above:
  -- where it goes; where it is, if it is there, is the place before.
  local function place(S, M, len, s, n, desc)
    local lo, hi = 1, len + 1
    while lo < hi do
      local mid = (lo + hi - (lo + hi) % 2) / 2
      local sm = S[mid]
      if s > sm or (s == sm and before(n, M[mid], desc)) then hi = mid else lo = mid + 1 end
    end
    return lo
  end

  -- Whether any move of period key k can reach its top N: one passes the
  -- copy's last place (B, at cap). The copy's tail never falls below B, so
  -- a move that stays below it changes nothing in the top N; most calls on
  -- a large board read this one entry, not the copy.
  local function any_reaches(k, cap, moves, members, sg, desc)
    local B, BM
    if desc then
      B = call('ZRANGE', k, cap - 1, cap - 1, 'REV', 'WITHSCORES')
    else
      B = call('ZRANGE', k, cap - 1, cap - 1, 'WITHSCORES')
    end
    if not B[1] then return true end
    B, BM = { sg * B[2] }, { B[1] }
    for x = 1, #moves, 4 do
      if above(B, BM, 1, sg * moves[x + 3], members[moves[x + 1]], desc) then return true end
    end
    return false
  end

  -- Notes event i's change in period `period` (a top of N) in by_event,
  -- if its move from place `from` (nil: outside the copy) to place `to`
  -- of the copy M (len entries) is one: up into or inside the top N.
  -- value: what the mover now holds; p: on boards ranked by several
  -- columns, the bytes of an entry before its player id.
  local function note(by_event, N, i, period, from, to, value, M, len, p)
    if to > N or (from and from <= N and to >= from) then return end
    local function who(q)
      if p then return string.sub(M[q], p + 1) end
      return M[q]
    end
    local was_in = from and from <= N
    local last = was_in and from or min(N + 1, len)
    local passed = {}
    for q = to + 1, min(last, to + PASSED) do passed[#passed + 1] = who(q) end
    local pushed = ''
    if not was_in and len > N then pushed = who(N + 1) end
    local list = by_event[i] or {}
    list[#list + 1] = { i, period, was_in and from or 0, to, value, pushed, passed }
    by_event[i] = list
  end

  -- The copy C of a top: S, M (best first), at, len, whole (it is the whole
  -- board), cap (its most places). Shifting entries costs what the move
  -- spans (table.insert and table.remove shift the rest of the array).

  -- Moves the entry of `name` at `from` to score s; returns its new place,
  -- or nil when it fell below the copy (which then drops it).
  local function shift(C, from, s, name, desc)
    local S, M, len = C.S, C.M, C.len
    -- Placed among the entries as they are, its old one included.
    local to = place(S, M, len, s, name, desc)
    if to <= from then
      for p = from, to + 1, -1 do S[p], M[p] = S[p - 1], M[p - 1] end
    elseif to == len + 1 and not C.whole then
      for p = from, len - 1 do S[p], M[p] = S[p + 1], M[p + 1] end
      S[len], M[len] = nil, nil
      C.len, C.at[name] = len - 1, nil
      return nil
    else
      to = to - 1
      for p = from, to - 1 do S[p], M[p] = S[p + 1], M[p + 1] end
    end
    S[to], M[to] = s, name
    return to
  end

  -- Places `name`, not in the copy, at score s; returns its place, or nil
  -- when it stays below the copy.
  local function enter(C, s, name, desc)
    local S, M, len = C.S, C.M, C.len
    local to = place(S, M, len, s, name, desc)
    if to > len and not C.whole then return nil end
    for p = len, to, -1 do S[p + 1], M[p + 1] = S[p], M[p] end
    S[to], M[to] = s, name
    C.at[name] = true
    len = len + 1
    if len > C.cap then
      C.at[M[len]] = nil
      S[len], M[len] = nil, nil
      len = len - 1
      C.whole = false
    end
    C.len = len
    return to
  end

  -- Period j's top as its moves (flat: i, m, value before, value after)
  -- leave it: plays them on the copy, in order, and adds each change to
  -- by_event[i].
  local function play(A, j, moves, by_event)
    local N, desc, members = A.h.notify, A.h.desc, A.members
    local sg = desc and 1 or -1
    local nmv, d = #moves, 0
    for x = 1, nmv, 4 do
      local old = moves[x + 2]
      if old and sg * moves[x + 3] < sg * old then d = d + 1 end
    end
    local cap, k = N + 1 + d, A.pk[j]
    if not any_reaches(k, cap, moves, members, sg, desc) then return end
    local S, M, at, whole, len = read_top(k, cap, sg)
    local C = { S = S, M = M, at = at, whole = whole, len = len, cap = cap }
    local period = A.h.periods[j].id
    for x = 1, nmv, 4 do
      local i, name, new = moves[x], members[moves[x + 1]], moves[x + 3]
      local s, tail = sg * new, S[C.len]
      -- A member outside the copy that stays below its last entry changes
      -- nothing the copy holds (inline: this runs for every move).
      if at[name] or not tail or C.whole or s > tail or (s == tail and before(name, M[C.len], desc)) then
        local from, to
        if at[name] then
          from = place(S, M, C.len, sg * moves[x + 2], name, desc) - 1
          if M[from] ~= name then
            -- Cannot happen (the copy holds the scores phase 1 read); a
            -- script must not fail once it has written, so look it up.
            for p = 1, C.len do
              if M[p] == name then from = p end
            end
          end
          to = shift(C, from, s, name, desc)
        else
          to = enter(C, s, name, desc)
        end
        if to then note(by_event, N, i, period, from, to, new, M, C.len) end
      end
    end
  end

  -- Boards ranked by several columns (apply/columns.lua): period j's top
  -- as its moves leave it, played as play() does on a copy of member bytes
  -- (ascending bytes is the board's order; every score is 0), a player
  -- found by their row's first bytes and their id. A change carries the
  -- stored row instead of a stored score.
  local function play_rows(A, j, moves, by_event)
    local N, members, p, sub = A.h.notify, A.members, A.cols.prefix, string.sub
    local function key(m, row) return sub(row, 1, p) .. members[m] end
    local function above(a, b) return before(a, b, false) end
    local nmv, d = #moves, 0
    for x = 1, nmv, 4 do
      local m, old = moves[x + 1], moves[x + 2]
      if old and above(key(m, old), key(m, moves[x + 3])) then d = d + 1 end
    end
    local cap, k = N + 1 + d, A.pk[j]
    local B = call('ZRANGE', k, cap - 1, cap - 1)[1]
    if B then
      local reaches = false
      for x = 1, nmv, 4 do
        if above(key(moves[x + 1], moves[x + 3]), B) then reaches = true break end
      end
      if not reaches then return end
    end
    local M = call('ZRANGE', k, 0, cap - 1)
    local len, whole, at = #M, #M < cap, {}
    for x = 1, len do at[sub(M[x], p + 1)] = true end
    -- The first place whose entry e ranks above.
    local function place(e)
      local lo, hi = 1, len + 1
      while lo < hi do
        local mid = (lo + hi - (lo + hi) % 2) / 2
        if above(e, M[mid]) then hi = mid else lo = mid + 1 end
      end
      return lo
    end
    local period = A.h.periods[j].id
    for x = 1, nmv, 4 do
      local i, m, row = moves[x], moves[x + 1], moves[x + 3]
      local name, new, tail = members[m], key(m, row), M[len]
      if at[name] or not tail or whole or above(new, tail) then
        local from, to = nil, place(new)
        if at[name] then
          local was = key(m, moves[x + 2])
          from = place(was) - 1
          if M[from] ~= was then
            for q = 1, len do
              if M[q] == was then from = q end
            end
          end
          -- Placed among the entries as they are, its old one included.
          table.remove(M, from)
          if to == len + 1 and not whole then
            len, at[name], to = len - 1, nil, nil
          else
            if to > from then to = to - 1 end
            table.insert(M, to, new)
          end
        elseif to > len and not whole then
          to = nil
        else
          table.insert(M, to, new)
          len, at[name] = len + 1, true
          if len > cap then
            at[sub(M[len], p + 1)], M[len] = nil, nil
            len, whole = len - 1, false
          end
        end
        if to then note(by_event, N, i, period, from, to, row, M, len, p) end
      end
    end
  end

  -- The call's changes, as one MessagePack array in event order (nil for
  -- none); remembers each event's.
  function ApplyChanges.run(A)
    local h, by_event = A.h, {}
    for j = 1, A.np do
      local moves = A.trans[j]
      if moves and #moves > 0 then
        if A.cols then play_rows(A, j, moves, by_event) else play(A, j, moves, by_event) end
      end
    end
    local out = {}
    local pos, redone = A.pos, A.redone
    for i = 1, A.ne do
      local list = by_event[i]
      if list then
        call('SET', h.changes .. h.fields[pos[i]] .. ':' .. format('%d', pos[-i]), cmsgpack.pack(list), 'EX', h.ttl)
      end
      if redone[i] then
        local got = call('GET', h.changes .. h.fields[redone[i]] .. ':' .. format('%d', redone[-i]))
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
