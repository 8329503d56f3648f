-- apply/columns.lua: the rows of a board ranked by several columns (the
-- header's cols: n, desc and modes per column, best, earliest),
-- following the model in src/board/columns.rs.
--
-- A row as stored (the period's rows hash, player -> row; A.cur[j][m] in
-- the call) is a string of 8-byte fields: the row key (one per column),
-- then on earliest boards the tie key (the time of the event that last
-- changed the row), then on boards with a latest column the newest event
-- time the row took. Each field of r (the value, negated on desc columns,
-- so smaller is better): a byte 1 then r in 7 bytes big-endian when
-- r >= 0, a byte 0 then 2^53 + r when r < 0; every step stays below 2^53,
-- so doubles make the bytes exactly. The member in the period key (or the
-- shadow, for a hidden player) is the row's first `prefix` bytes (row key
-- and tie key) then the player id: the sorted set's scores are all 0 and
-- Redis orders it by those bytes, which is the board's order.

local ApplyColumns = {}
do
  local spack, sunpack, rep, sub = struct.pack, struct.unpack, string.rep, string.sub
  local TWO53, MAXV = 2 ^ 53, Const.MAX_EXACT
  local SUM, MAX, MIN, LATEST = 1, 2, 3, 4
  local CODE = { sum = SUM, max = MAX, min = MIN, latest = LATEST }

  -- Phase 3, period j (values c, before the call b) of a board whose
  -- members start with p bytes of their row, rl of them its row key: the
  -- ZREM and ZADD arguments of its key and its shadow, the rows hash's
  -- HSET, and with a dense index the net change of the visible members
  -- holding each row key.
  local function moves(p, rl, A, j, c)
    local members, hidden, any_hidden, dense = A.members, A.hidden, A.any_hidden, A.dense_on
    local b, list = A.base[j], A.lists[j]
    local delta = {}
    local out = { rem = {}, add = {}, shadow_rem = {}, shadow_add = {}, rows = {}, dense = delta }
    for x = 1, A.list_len[j] do
      local m = x
      if list then m = list[x] end
      local old, new = b[m], c[m]
      if old ~= new then
        local name, rows = members[m], out.rows
        rows[#rows + 1], rows[#rows + 2] = name, new
        local was, now = old, new
        if #new ~= p then was, now = old and sub(old, 1, p), sub(new, 1, p) end
        if was ~= now then
          local rem, add = out.rem, out.add
          local shadowed = any_hidden and hidden[m]
          if shadowed then rem, add = out.shadow_rem, out.shadow_add end
          if was then rem[#rem + 1] = was .. name end
          add[#add + 1], add[#add + 2] = 0, now .. name
          if dense and not shadowed then
            local kw, kn = was and sub(was, 1, rl), sub(now, 1, rl)
            if kw ~= kn then
              if kw then delta[kw] = (delta[kw] or 0) - 1 end
              delta[kn] = (delta[kn] or 0) + 1
            end
          end
        end
      end
    end
    return out
  end

  -- The rows of header hc: r.next(old, ev, at, ts), r.moves(A, j, c),
  -- r.value(row, i) (a stored row's value in column i), r.n, r.desc[i] (column
  -- i is desc), r.prefix (a member's bytes before the player id), r.row_len
  -- (the row key's: what a dense index holds).
  function ApplyColumns.open(hc)
    local n, best, earliest = hc.n, hc.best, hc.earliest
    -- A latest column: a stored row keeps the newest event time it took.
    local latest = false
    for i = 1, n do latest = latest or hc.modes[i] == 'latest' end
    local reached_at = earliest and n + 1
    local newest_at = latest and n + 1 + (earliest and 1 or 0)
    local fields = n + (earliest and 1 or 0) + (latest and 1 or 0)
    local fmt = '>' .. rep('BI7', fields)
    local neg, mode = {}, {}
    for i = 1, n do neg[i], mode[i] = hc.desc[i] == 1, CODE[hc.modes[i]] end
    local r = { n = n, prefix = 8 * (n + (earliest and 1 or 0)), row_len = 8 * n, desc = neg }

    -- A stored row's fields as numbers: values, then the times.
    local function decode(s)
      local t = { sunpack(fmt, s) }
      local v = {}
      for i = 1, fields do
        local x = t[2 * i]
        if t[2 * i - 1] == 0 then x = x - TWO53 end
        if neg[i] then x = -x end
        v[i] = x
      end
      return v
    end

    -- Column i's value in stored row s.
    function r.value(s, i)
      return decode(s)[i]
    end

    local args = {}
    -- The stored row of fields v.
    local function encode(v)
      for i = 1, fields do
        local x = v[i]
        if neg[i] then x = -x end
        if x >= 0 then
          args[2 * i - 1], args[2 * i] = 1, x
        else
          args[2 * i - 1], args[2 * i] = 0, TWO53 + x
        end
      end
      return spack(fmt, unpack(args, 1, 2 * fields))
    end

    -- The stored row after the event whose values start at ev[at] (time
    -- ts; the row it makes on its own, encoded by the worker, follows at
    -- ev[at + n]), given the stored row old (false: none); false when a
    -- sum column's total would leave the exact range (nothing is taken).
    function r.next(old, ev, at, ts)
      if not old then return ev[at + n] end
      local v = decode(old)
      if best then
        -- The first column that differs decides; equal rows keep the old.
        for i = 1, n do
          local x, y = ev[at + i - 1], v[i]
          if x ~= y then
            if (neg[i] and x > y) or (not neg[i] and x < y) then return ev[at + n] end
            return old
          end
        end
        return old
      end
      local newer = newest_at and ts > v[newest_at]
      local changed = false
      for i = 1, n do
        local x, y, md = ev[at + i - 1], v[i], mode[i]
        local z = y
        if md == SUM then
          z = y + x
          if z > MAXV or z < -MAXV then return false end
        elseif md == MAX then
          if x > y then z = x end
        elseif md == MIN then
          if x < y then z = x end
        elseif newer then
          z = x
        end
        if z ~= y then v[i], changed = z, true end
      end
      if changed and reached_at then v[reached_at] = ts end
      if newer then v[newest_at] = ts end
      if not (changed or newer) then return old end
      return encode(v)
    end

    -- Phase 3, period j (values c): see moves below.
    function r.moves(A, j, c)
      return moves(r.prefix, r.row_len, A, j, c)
    end

    return r
  end
end
