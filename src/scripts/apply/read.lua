-- apply/read.lua: phase 1 of an apply call: what the batch's members hold
-- now, read with one command per period and CHUNK members, never one per
-- event. Fills the call's state A (see apply.lua):
--   A.sealed[j], A.closes[j]  period j is sealed; its close time, ms (a
--                             period closed on demand, field
--                             "<period key>:closes" of the sealed hash)
--   A.hidden[m], A.any_hidden member m is hidden (its values are in the shadows)
--   A.cur[j][m]   the stored score (false: absent), as the events see it;
--                 only for the periods that are open and written; on
--                 boards ranked by several columns, the stored row
--                 (apply/columns.lua), from the period's rows hash
--   A.base[j][m]  the stored score before this call
--   A.times[j][m] "latest" only: the event time of the value
--   A.base_str[j][m] with SHIFT 1 and dense indexes: the stored score as
--                 Redis wrote it, which is also the value's name
--   A.att[j][m]   max_attempts only: the events m has had applied to j

local ApplyRead = {}
do
  local call, min, tonumber = redis.call, math.min, tonumber
  local CHUNK = Calls.CHUNK

  local function sealing(A)
    A.sealed, A.closes = {}, {}
    if not A.seal_on then return end
    for j = 1, A.np do
      local v = call('HMGET', A.sealed_key, A.pk[j], A.pk[j] .. ':closes')
      A.sealed[j], A.closes[j] = v[1] ~= false, tonumber(v[2])
    end
  end

  local function hidden(A)
    local members, nm = A.members, A.nm
    A.hidden, A.any_hidden = {}, false
    if call('EXISTS', A.hidden_key) == 0 then return end
    for s = 1, nm, CHUNK do
      local e = min(s + CHUNK - 1, nm)
      local flags = call('SMISMEMBER', A.hidden_key, unpack(members, s, e))
      for x = s, e do
        if flags[x - s + 1] == 1 then A.hidden[x], A.any_hidden = true, true end
      end
    end
  end

  -- Period j's values: ZMSCORE (and, for "latest", HMGET of event times)
  -- of its members; a hidden member's value is in the shadow.
  local function values(A, j)
    local members, list, nl = A.members, A.lists[j], A.list_len[j]
    local latest, plain, key = A.latest, A.plain, A.pk[j]
    local c, b, t, bs = {}, {}, {}, {}
    for s = 1, nl, CHUNK do
      local e = min(s + CHUNK - 1, nl)
      local scores, ts
      if list then
        local names = {}
        for x = s, e do names[x - s + 1] = members[list[x]] end
        scores = call('ZMSCORE', key, unpack(names))
        if latest then ts = call('HMGET', A.times_keys[j], unpack(names)) end
      else
        scores = call('ZMSCORE', key, unpack(members, s, e))
        if latest then ts = call('HMGET', A.times_keys[j], unpack(members, s, e)) end
      end
      for x = s, e do
        local m, score = x, scores[x - s + 1]
        if list then m = list[x] end
        local v = false
        if score then
          -- score + 0: Lua converts the decimal string itself, without a
          -- function call (tonumber is a C function).
          v = score + 0
          if plain then bs[m] = score end
        end
        c[m], b[m] = v, v
        if latest and ts[x - s + 1] then t[m] = tonumber(ts[x - s + 1]) end
      end
    end
    if A.any_hidden then
      local names, ms = {}, {}
      for x = 1, nl do
        local m = x
        if list then m = list[x] end
        if A.hidden[m] then names[#names + 1], ms[#ms + 1] = members[m], m end
      end
      for s = 1, #names, CHUNK do
        local e = min(s + CHUNK - 1, #names)
        local scores = call('ZMSCORE', A.shadow_keys[j], unpack(names, s, e))
        for x = s, e do
          local v = scores[x - s + 1]
          if v then v = v + 0 end
          c[ms[x]], b[ms[x]], bs[ms[x]] = v, v, nil
        end
      end
    end
    A.cur[j], A.base[j], A.times[j], A.base_str[j] = c, b, t, bs
  end

  -- Period j's rows (boards ranked by several columns): HMGET of the rows
  -- hash, hidden members' too.
  local function rows(A, j)
    local members, list, nl = A.members, A.lists[j], A.list_len[j]
    local c, b = {}, {}
    for s = 1, nl, CHUNK do
      local e = min(s + CHUNK - 1, nl)
      local names = {}
      for x = s, e do names[x - s + 1] = members[list and list[x] or x] end
      local got = call('HMGET', A.rows_keys[j], unpack(names))
      for x = s, e do
        local m = list and list[x] or x
        c[m], b[m] = got[x - s + 1], got[x - s + 1]
      end
    end
    A.cur[j], A.base[j], A.times[j], A.base_str[j] = c, b, {}, {}
  end

  -- Period j's attempts per member.
  local function attempts(A, j)
    local members, list, nl, a = A.members, A.lists[j], A.list_len[j], {}
    for s = 1, nl, CHUNK do
      local e = min(s + CHUNK - 1, nl)
      local names = {}
      for x = s, e do
        local m = x
        if list then m = list[x] end
        names[x - s + 1] = members[m]
      end
      local got = call('HMGET', A.att_keys[j], unpack(names))
      for x = s, e do
        local m = x
        if list then m = list[x] end
        a[m] = tonumber(got[x - s + 1]) or 0
      end
    end
    A.att[j], A.att_moved[j] = a, {}
  end

  -- Phase 1: fills A as the header says.
  function ApplyRead.run(A)
    sealing(A)
    hidden(A)
    A.cur, A.base, A.times, A.base_str, A.att, A.att_moved = {}, {}, {}, {}, {}, {}
    for j = 1, A.np do
      if not A.sealed[j] and A.list_len[j] > 0 then
        if A.cols then rows(A, j) else values(A, j) end
        if A.attempts_on then attempts(A, j) end
      end
    end
  end
end
