-- read_rows.lua: the read API's queries on a board ranked by several
-- columns (see apply/columns.lua), each one atomic. The period key is a
-- sorted set whose scores are all 0: ascending member order is the board's
-- order, best first, and a member is its row's first PREFIX bytes (the row
-- key, ROW bytes, then the tie key) then the player id.
--
-- keys: period rows shadow dense? meta? versions?
-- derives: (none)
-- KEYS[1]   the period key
-- KEYS[2]   its rows hash (player -> row)
-- KEYS[3]   its shadow: the members of the tag's hidden players
-- KEYS[4]   boards with dense_rank: its dense index (the distinct row keys
--           of its visible players, each at score 0); without one, a key
--           that never exists when KEYS[5] follows (it counts 0)
-- KEYS[5]   boards that keep metadata: its meta hash (player -> compact JSON);
--           without one, a key that never exists when KEYS[6] follows
-- KEYS[6]   the shard ops only: the period's version hash (as read.lua's KEYS[4])
-- ARGV[1]   "top" | "player" | "around" | "page" | "players" | "rank_of"
-- ARGV[2]   PREFIX, ARGV[3] ROW
-- top:      ARGV[4] offset (0-based), ARGV[5] limit
-- player:   ARGV[4] player
-- around:   ARGV[4] player, ARGV[5] radius, ARGV[6] "1" to fill (the
--           window moves away from an edge instead of shrinking)
-- page:     ARGV[4] a member (where a cursor was made; it may have moved or
--           left since), ARGV[5] limit, ARGV[6] "next" (the entries after
--           it in board order) | "prev" (those before it)
-- players:  ARGV[4] the rank policy ("ordinal" | "competition" | "dense"),
--           ARGV[5..] players
-- rank_of:  ARGV[4] a row key, ARGV[5] the row key right after it (the
--           smallest key greater than every member with that row)
--
-- One shard of a sharded board (the reads merge the shards by member
-- bytes; each reply starts with the shard's version, as read.lua's do, and
-- carries every entry's meta, false where there is none):
-- shard_top:    ARGV[4] n: its first n entries
-- shard_seek:   ARGV[4] a member, ARGV[5] how many entries after it,
--               ARGV[6] how many before it
-- shard_counts: ARGV[4..] triples row key, the row key right after it,
--               member ("" for none): per triple the members with a better
--               row, with a better or equal row, and before the member
--
-- Replies (better: the players whose row is strictly better than the first
-- entry's, so that competition ranks follow from the rows of a page;
-- dense_better: the distinct rows strictly better than it, 0 without a
-- dense index):
-- top:      { total, start, better, dense_better, member1, member2, ... }
-- player:   false if absent, else { total, position (0-based), better,
--           dense_better, row, hidden (1: hidden; the position and counts
--           are where the player would stand among the visible players) }
-- around:   false if absent, else { total, start, better, dense_better, member1, ... }
-- page:     { total, start, better, dense_better, member1, ... } (no entries at an end)
-- players:  { total, then per player: member (false if absent or hidden)
--           and the count its rank is one more than (position for
--           "ordinal", better for "competition", dense_better for "dense") }
-- rank_of:  { total, better, better_or_equal, dense_better } for the row
-- With KEYS[5], every entry carries its meta (false: none): listings are
-- (member, meta) pairs, player ends with it, players rows are (member,
-- count, meta).
-- shard_top:    { ver, total, member1, meta1, ... }
-- shard_seek:   { ver, total, before (entries before the member), present
--               (1: the member is here), n_after, the n_after entries after
--               it, then the entries before it, nearest last; each member, meta }
-- shard_counts: { ver, total, then per triple better, better_or_equal, before }

local op, prefix, row_len = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local key, rows_key, shadow, dense, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local call, sub = redis.call, string.sub

-- The players strictly better than a member's row: every member below its
-- row key (a member is longer than its row key, so "(" excludes them all).
local function better_than(member)
  return call('ZLEXCOUNT', key, '-', '(' .. sub(member, 1, row_len))
end

-- The distinct rows strictly better than a member's (0 without an index).
local function dense_better(member)
  if not dense then return 0 end
  return call('ZLEXCOUNT', dense, '-', '(' .. sub(member, 1, row_len))
end

-- { total, start, better, dense_better, members... } of the entries start..stop.
-- The meta of the player of member (false: none).
local function meta_of(member)
  return call('HGET', meta, sub(member, prefix + 1))
end

-- Appends the members of page to out, each followed by its meta (one
-- HMGET; false where there is none).
local function with_metas(out, page)
  local players = {}
  for x = 1, #page do players[x] = sub(page[x], prefix + 1) end
  local metas = #page > 0 and call('HMGET', meta, unpack(players)) or {}
  for x = 1, #page do
    out[#out + 1], out[#out + 2] = page[x], metas[x]
  end
  return out
end

-- Appends the members of page to out, each followed by its meta with KEYS[5].
local function entries(out, page)
  if meta then return with_metas(out, page) end
  for x = 1, #page do out[#out + 1] = page[x] end
  return out
end

local function listing(total, start, stop)
  local page = call('ZRANGE', key, start, stop)
  local out = { total, start, 0, 0 }
  if page[1] then out[3], out[4] = better_than(page[1]), dense_better(page[1]) end
  return entries(out, page)
end

-- A player's member, position and whether they are hidden; nil if absent.
local function find(player)
  local row = call('HGET', rows_key, player)
  if not row then return nil end
  local member = sub(row, 1, prefix) .. player
  local position = call('ZRANK', key, member)
  if position then return member, position, false, row end
  if call('ZSCORE', shadow, member) then
    -- Where they would stand: the visible members before theirs.
    return member, call('ZLEXCOUNT', key, '-', '(' .. member), true, row
  end
  return nil
end

-- The shard's version (see read.lua).
local function version()
  return Value.version(KEYS[6])
end

local total = call('ZCARD', key)
if op == 'shard_top' then
  local n = tonumber(ARGV[4])
  local page = n > 0 and call('ZRANGE', key, 0, n - 1) or {}
  return with_metas({ version(), total }, page)
elseif op == 'shard_seek' then
  local at, after_n, before_n = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
  local before = call('ZLEXCOUNT', key, '-', '(' .. at)
  local present = call('ZSCORE', key, at) and 1 or 0
  local after = after_n > 0 and call('ZRANGE', key, '(' .. at, '+', 'BYLEX', 'LIMIT', 0, after_n) or {}
  local out = with_metas({ version(), total, before, present, #after }, after)
  if before_n > 0 and before > 0 then
    with_metas(out, call('ZRANGE', key, before - math.min(before, before_n), before - 1))
  end
  return out
elseif op == 'shard_counts' then
  local out = { version(), total }
  for i = 4, #ARGV, 3 do
    out[#out + 1] = call('ZLEXCOUNT', key, '-', '(' .. ARGV[i])
    out[#out + 1] = call('ZLEXCOUNT', key, '-', '(' .. ARGV[i + 1])
    out[#out + 1] = ARGV[i + 2] == '' and 0 or call('ZLEXCOUNT', key, '-', '(' .. ARGV[i + 2])
  end
  return out
end
if op == 'page' then
  local at, limit = ARGV[4], tonumber(ARGV[5])
  local page
  if ARGV[6] == 'next' then
    page = call('ZRANGE', key, '(' .. at, '+', 'BYLEX', 'LIMIT', 0, limit)
  else
    page = call('ZRANGE', key, '(' .. at, '-', 'BYLEX', 'REV', 'LIMIT', 0, limit)
    local n = #page
    for x = 1, math.floor(n / 2) do page[x], page[n - x + 1] = page[n - x + 1], page[x] end
  end
  if not page[1] then return { total, 0, 0, 0 } end
  local out = { total, call('ZLEXCOUNT', key, '-', '(' .. page[1]), better_than(page[1]), dense_better(page[1]) }
  return entries(out, page)
end
if op == 'players' then
  local out, policy = { total }, ARGV[4]
  for s = 5, #ARGV, 1000 do
    local e = math.min(s + 999, #ARGV)
    local rows = call('HMGET', rows_key, unpack(ARGV, s, e))
    for i = s, e do
      local row, member, count = rows[i - s + 1], false, 0
      if row then
        member = sub(row, 1, prefix) .. ARGV[i]
        local position = call('ZRANK', key, member)
        if not position then
          member = false
        elseif policy == 'ordinal' then
          count = position
        elseif policy == 'dense' then
          count = dense_better(member)
        else
          count = better_than(member)
        end
      end
      out[#out + 1], out[#out + 2] = member, count
      if meta then out[#out + 1] = member and meta_of(member) end
    end
  end
  return out
end
if op == 'rank_of' then
  return { total, call('ZLEXCOUNT', key, '-', '(' .. ARGV[4]), call('ZLEXCOUNT', key, '-', '(' .. ARGV[5]),
           dense_better(ARGV[4]) }
end
if op == 'top' then
  local offset, limit = tonumber(ARGV[4]), tonumber(ARGV[5])
  if limit == 0 or offset >= total then return { total, offset, 0, 0 } end
  return listing(total, offset, offset + limit - 1)
end
local member, position, hidden, row = find(ARGV[4])
if not member then return false end
if op == 'player' then
  local out = { total, position, better_than(member), dense_better(member), row, hidden and 1 or 0 }
  if meta then out[#out + 1] = meta_of(member) end
  return out
end
if op == 'around' then
  local radius = tonumber(ARGV[5])
  -- A hidden player is not in the key: the window around their place.
  local start, stop = position - radius, position + radius - (hidden and 1 or 0)
  if ARGV[6] == '1' then
    if start < 0 then start, stop = 0, stop - start end
    if stop > total - 1 then start, stop = start - (stop - (total - 1)), total - 1 end
  end
  start = math.max(0, start)
  if stop < start then return { total, start, 0, 0 } end
  return listing(total, start, stop)
end
return redis.error_reply('unknown op ' .. tostring(op))
