-- apply/write.lua: phase 3 of an apply call: per period, one variadic
-- ZADD of the members whose value moved (a hidden member's to the shadow),
-- their event times, attempts and metadata, then top-K trimming, the dense
-- index (dense.lua) and the expiry. A period nothing moved in is left
-- alone: it exists, registered and with its expiry, since its members were
-- written. Every period key written joins the tag's registry set, which
-- moderation walks.
--
-- Metadata: a member's meta in a period is the meta of the event that
-- decided its value there (see decide.lua), written with the value (HSET,
-- or HDEL when that event had none), and removed with the member by top-K
-- trimming.

local ApplyWrite = {}
do
  local format, tonumber = string.format, tonumber
  local variadic = Calls.variadic

  -- Boards ranked by several columns: period j's members whose row moved
  -- (apply/columns.lua), out of their old places and into their new ones,
  -- and their rows. Returns whether any moved.
  local function write_rows(A, j, c)
    local mv = A.cols.moves(A, j, c)
    local k, shadow = A.pk[j], A.shadow_keys[j]
    if #mv.rem > 0 then variadic('ZREM', k, mv.rem, 1) end
    if #mv.add > 0 then variadic('ZADD', k, mv.add, 2) end
    if #mv.shadow_rem > 0 then variadic('ZREM', shadow, mv.shadow_rem, 1) end
    if #mv.shadow_add > 0 then variadic('ZADD', shadow, mv.shadow_add, 2) end
    if #mv.rows > 0 then variadic('HSET', A.rows_keys[j], mv.rows, 2) end
    return #mv.rows > 0, #mv.shadow_add > 0, mv.dense
  end

  -- Top-K: period j's key k over its limit drops its worst members, with
  -- their metadata (on boards ranked by several columns, their rows too), and
  -- counts them out of delta (the dense index's changes).
  local function trim(A, j, k, delta)
    local victims = TopK.trim(k, A.h.top_k, A.h.desc)
    if #victims == 0 then return end
    local gone = {}
    if A.cols then
      -- Their rows go with them (the member is the row's first bytes and the player id).
      local p, rl = A.cols.prefix, A.cols.row_len
      for v = 1, #victims, 2 do
        gone[#gone + 1] = string.sub(victims[v], p + 1)
        local row = string.sub(victims[v], 1, rl)
        delta[row] = (delta[row] or 0) - 1
      end
      variadic('HDEL', A.rows_keys[j], gone, 1)
      if A.meta_on then variadic('HDEL', A.meta_keys[j], gone, 1) end
      return
    end
    for v = 2, #victims, 2 do
      local name = A.value_name(tonumber(victims[v]), victims[v])
      delta[name] = (delta[name] or 0) - 1
    end
    if A.meta_on then
      for v = 1, #victims, 2 do gone[#gone + 1] = victims[v] end
      variadic('HDEL', A.meta_keys[j], gone, 1)
    end
  end

  -- Writes period j, whose values as the events left them are c. Returns
  -- whether it wrote anything.
  local function write_period(A, j, c)
    local k = A.pk[j]
    local members, dec, decimal, name_of = A.members, A.dec, A.decimal, A.value_name
    local unit, dense_on, latest, meta_on = A.unit, A.dense_on, A.latest, A.meta_on
    local hidden, any_hidden = A.hidden, A.any_hidden
    local delta = {}
    local pairs_, np_ = {}, 0
    -- hidden members' values, for the shadow key
    local shadowed = {}
    local stamps = {}
    local b, bs = A.base[j], A.base_str[j]
    local list = A.lists[j]
    local moved = latest and A.moved[j]
    local rows_moved, rows_shadowed = false, false
    if A.cols then rows_moved, rows_shadowed, delta = write_rows(A, j, c) end
    for x = 1, A.cols and 0 or A.list_len[j] do
      local m = x
      if list then m = list[x] end
      local old, new = b[m], c[m]
      if old ~= new and any_hidden and hidden[m] then
        shadowed[#shadowed + 1] = dec(new)
        shadowed[#shadowed + 1] = members[m]
      elseif old ~= new then
        -- dec(new), inline: this runs for every member written.
        local new_str = decimal[new]
        if not new_str then
          new_str = format('%d', new)
          decimal[new] = new_str
        end
        np_ = np_ + 2
        pairs_[np_ - 1] = new_str
        pairs_[np_] = members[m]
        if dense_on then
          -- The values' decimal names, inline for SHIFT 1: this runs for
          -- every member written.
          local name
          if old then
            name = unit and bs[m] or name_of(old)
            delta[name] = (delta[name] or 0) - 1
          end
          name = unit and new_str or name_of(new)
          delta[name] = (delta[name] or 0) + 1
        end
      end
      if moved and moved[m] then
        stamps[#stamps + 1] = members[m]
        stamps[#stamps + 1] = format('%d', A.times[j][m])
      end
    end
    local metas = meta_on and A.metas[j]
    local att_moved = A.attempts_on and A.att_moved[j]
    if np_ == 0 and #shadowed == 0 and #stamps == 0 and not rows_moved and not (metas and next(metas))
      and not (att_moved and next(att_moved)) then
      return false
    end
    if np_ > 0 then variadic('ZADD', k, pairs_, 2) end
    if #shadowed > 0 then variadic('ZADD', A.shadow_keys[j], shadowed, 2) end
    if #stamps > 0 then variadic('HSET', A.times_keys[j], stamps, 2) end
    if att_moved then
      local counts = {}
      for m in pairs(att_moved) do
        counts[#counts + 1] = members[m]
        counts[#counts + 1] = format('%d', A.att[j][m])
      end
      if #counts > 0 then variadic('HSET', A.att_keys[j], counts, 2) end
    end
    local mk = A.meta_keys[j]
    if metas then
      -- Each decided member's meta; a member that had a value before may
      -- hold the meta of an earlier event, which an event without one clears.
      local set, del = {}, {}
      for m, meta in pairs(metas) do
        if meta ~= '' then
          set[#set + 1] = members[m]
          set[#set + 1] = meta
        elseif b[m] then
          del[#del + 1] = members[m]
        end
      end
      if #set > 0 then variadic('HSET', mk, set, 2) end
      if #del > 0 then variadic('HDEL', mk, del, 1) end
    end
    trim(A, j, k, delta)
    if dense_on then Dense.settle(A.dense_keys[j], A.count_keys[j], delta, A.cols) end
    local at = A.h.periods[j].expire_at
    if at ~= 0 then
      local keys = { k }
      if dense_on then
        keys[#keys + 1] = A.dense_keys[j]
        keys[#keys + 1] = A.count_keys[j]
      end
      if latest then keys[#keys + 1] = A.times_keys[j] end
      if meta_on then keys[#keys + 1] = mk end
      if #shadowed > 0 or rows_shadowed then keys[#keys + 1] = A.shadow_keys[j] end
      if A.cols then keys[#keys + 1] = A.rows_keys[j] end
      if A.attempts_on then keys[#keys + 1] = A.att_keys[j] end
      Expiry.at(format('%d', at), keys)
    end
    return true
  end

  -- Phase 3: writes every period phase 1 read (open, and written by some
  -- event of the batch), and registers the period keys written.
  function ApplyWrite.run(A)
    local registered = {}
    for j = 1, A.np do
      local c = A.cur[j]
      if c and write_period(A, j, c) then registered[#registered + 1] = A.pk[j] end
    end
    if #registered > 0 then variadic('SADD', KEYS[A.h.registry], registered, 1) end
  end
end
