-- dense.lua: a period key's dense index, which dense ranks are read from
-- without scanning the board.
--
-- The index is a zset of the key's distinct values (member and score both
-- the value's decimal name, see value.lua). A live period key also keeps a
-- count of the members holding each value, so that the index stays exact
-- as members come and go: a value joins the index when its count leaves 0
-- and leaves it when its count returns to 0. The counts hash holds only
-- counts of 2 or more: a value in the index without a field is held by one
-- member (most values, on boards of times or large sums), so the hash costs
-- nothing for them.
--
-- Sealed snapshots and rolling boards have an index without counts (they
-- change only by moderation): a value leaves it when no member of the key
-- holds it any more (Dense.leave_uncounted).

local Dense = {}
do
  local call, min, tonumber, format = redis.call, math.min, tonumber, string.format
  local CHUNK, variadic = Calls.CHUNK, Calls.variadic

  -- The one field of a counts hash that is not a value. A hash of up to
  -- hash-max-listpack-entries (512 by default) fields is a listpack,
  -- scanned end to end on every lookup; a value longer than
  -- hash-max-listpack-value makes it a hash table for good.
  local PIN_FIELD = 'encoding'
  local PIN_VALUE = 'a hash table: this value is longer than hash-max-listpack-value (64 bytes)'

  -- Member counts as strings, made once.
  local small = {}
  for n = 1, 16 do small[n] = format('%d', n) end

  -- Makes a counted index exact again after members moved: delta maps a
  -- value's name to the net change of the members holding it. One HMGET of
  -- the counts and one ZMSCORE of the index for the values that changed
  -- (a value in the index without a count is held once), then variadic writes.
  -- rows: a board ranked by several columns, whose "values" are row keys
  -- (bytes), each in the index at score 0 (ordered by their bytes).
  function Dense.settle(index, counts, delta, rows)
    local vals, nv = {}, 0
    for v, d in pairs(delta) do
      if d ~= 0 then
        nv = nv + 1
        vals[nv] = v
      end
    end
    if nv == 0 then return end
    local set, del, add, rem = {}, {}, {}, {}
    local ns, nd, na, nr = 0, 0, 0, 0
    for s = 1, nv, CHUNK do
      local e = min(s + CHUNK - 1, nv)
      local olds = call('HMGET', counts, unpack(vals, s, e))
      -- Values without a count: held once if in the index, else by none.
      local bare, nb = {}, 0
      for x = s, e do
        if not olds[x - s + 1] then
          nb = nb + 1
          bare[nb] = vals[x]
        end
      end
      local held = {}
      if nb > 0 then
        local in_index = call('ZMSCORE', index, unpack(bare))
        for y = 1, nb do held[bare[y]] = in_index[y] end
      end
      for x = s, e do
        local v = vals[x]
        local field = tonumber(olds[x - s + 1])
        local old = field or (held[v] and 1 or 0)
        local new = old + delta[v]
        if new > 1 then
          set[ns + 1], set[ns + 2] = v, small[new] or format('%d', new)
          ns = ns + 2
        elseif field then
          nd = nd + 1
          del[nd] = v
        end
        if new > 0 and old <= 0 then
          add[na + 1], add[na + 2] = rows and 0 or v, v
          na = na + 2
        elseif new <= 0 and old > 0 then
          nr = nr + 1
          rem[nr] = v
        end
      end
    end
    if ns > 0 then
      call('HSETNX', counts, PIN_FIELD, PIN_VALUE)
      variadic('HSET', counts, set, 2)
    end
    if nd > 0 then variadic('HDEL', counts, del, 1) end
    if na > 0 then variadic('ZADD', index, add, 2) end
    if nr > 0 then variadic('ZREM', index, rem, 1) end
  end

  -- Adds the values named in the list names to an index without counts.
  function Dense.add_uncounted(index, names)
    local seen, pairs_ = {}, {}
    for _, v in ipairs(names) do
      if not seen[v] then
        seen[v] = true
        pairs_[#pairs_ + 1] = v
        pairs_[#pairs_ + 1] = v
      end
    end
    if #pairs_ > 0 then variadic('ZADD', index, pairs_, 2) end
  end

  -- A member whose row key is row has left key (a board ranked by several
  -- columns), whose index has no counts: the row leaves the index when no
  -- member of key starts with it any more.
  function Dense.leave_uncounted_row(key, index, row)
    local next = call('ZRANGE', key, '[' .. row, '+', 'BYLEX', 'LIMIT', 0, 1)[1]
    if not next or string.sub(next, 1, #row) ~= row then call('ZREM', index, row) end
  end

  -- A member of value v (named name) has left key, whose index has no
  -- counts: v leaves the index when no member of key holds it any more.
  function Dense.leave_uncounted(key, index, v, name, shift)
    local lo = v * shift
    if call('ZCOUNT', key, format('%d', lo), format('%d', lo + shift - 1)) == 0 then
      call('ZREM', index, name)
    end
  end
end
