-- read.lua: the read API's queries, each one atomic, so a page, a rank and
-- the neighbours describe one instant.
--
-- Stored scores are packed: value = floor(stored / SHIFT) (see src/score.rs),
-- and the stored scores of value v are [v * SHIFT, (v + 1) * SHIFT).
-- "Better" means higher on desc boards and lower on asc boards. Board order
-- is Redis's: by stored score, best first, and among equal stored scores by
-- member bytes (descending on desc boards, ascending on asc boards).
--
-- keys: period dense shadow versions meta?
-- derives: (none)
-- KEYS[1]   the period key
-- KEYS[2]   its dense index (one member per distinct value)
-- KEYS[3]   its shadow: the values of the tag's hidden players
-- KEYS[4]   its version hash (see the shard ops below; only they read it)
-- KEYS[5]   boards that keep metadata only: its meta hash (member -> compact JSON)
-- ARGV[1]   "top" | "player" | "around" | "players" | "rank_of" | "page"
-- ARGV[2]   "desc" | "asc"
-- ARGV[3]   SHIFT
-- top:      ARGV[4] offset (0-based), ARGV[5] limit
-- player:   ARGV[4] member
-- around:   ARGV[4] member, ARGV[5] radius, ARGV[6] "1" to fill (the window
--           moves away from an edge instead of shrinking)
-- players:  ARGV[4] the rank policy ("ordinal" | "competition" | "dense"),
--           ARGV[5..] members
-- rank_of:  ARGV[4] a value
-- page:     ARGV[4] stored score, ARGV[5] member (the entry a cursor was
--           made at, which may have moved or left since), ARGV[6] limit,
--           ARGV[7] "next" (the entries after it) | "prev" (those before it)
--
-- One shard of a sharded board (the reads merge the shards; each reply
-- starts with the shard's version: the sum of the values of a hash of
-- counters (KEYS[4]) that rise with every change the key can see, so equal versions
-- mean the shard stood still: its tag's recorded offsets, which every
-- write raises; for sealed snapshots and rolling boards, its versions hash):
-- shard_top:    ARGV[4] n: its first n entries
-- shard_seek:   ARGV[4] stored, ARGV[5] member,
--               ARGV[6] how many entries after, ARGV[7] how many before
-- shard_counts: ARGV[4..] triples value, stored, member ("" for none): per triple the members with a better
--               value and better_or_equal, and the entries before
--               (stored, member) in board order
-- (The reads' last step asks each shard's version alone with HVALS of its
-- version hash, and sums the values the same way.)
--
-- Replies (better = members with a strictly better value than the first
-- entry's; dense_better = distinct values strictly better than it):
-- top:      { total, start, better, dense_better, member1, stored1, ... }
-- player:   false if absent, else { total, position (0-based), better, dense_better, stored,
--           meta (false: none), hidden (1: the player is hidden, and the position and
--           counts are where they would stand among the visible players) }
-- around:   false if absent, else { total, start, better, dense_better, member1, stored1, ... }
-- players:  { total, then per member: stored (false if absent), and the count
--           its rank is one more than: position for "ordinal", better for
--           "competition", dense_better for "dense" }
-- rank_of:  { total, better, better_or_equal, dense_better } for the value
-- With KEYS[5], every entry carries its meta (false: none) after its stored
-- score: listings are (member, stored, meta) triples and players rows are
-- (stored, count, meta).
-- Hidden players are not in the period key, so only "player" sees them.
-- page:     { total, start, better, dense_better, member1, stored1, ... }
-- shard_top:    { ver, total, member1, stored1, [meta1], ... }
-- shard_seek:   { ver, total, before (entries before the key), present (1:
--               the key's member is here at that stored score), n_after,
--               the n_after entries after it, then the entries before it,
--               nearest last; each member, stored, [meta] }
-- shard_counts: { ver, total, then per triple better, better_or_equal, before }

local key, dense, shadow, versions, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local op, order, shift = ARGV[1], ARGV[2], tonumber(ARGV[3])
local desc = order == 'desc'
local call, floor, format, min, max = redis.call, math.floor, string.format, math.min, math.max

local num = Value.fmt

-- Members with a value better than v.
local function members_better(v)
  if desc then return call('ZCOUNT', key, num((v + 1) * shift), '+inf') end
  return call('ZCOUNT', key, '-inf', '(' .. num(v * shift))
end

-- Distinct values better than v.
local function values_better(v)
  if desc then return call('ZCOUNT', dense, '(' .. num(v), '+inf') end
  return call('ZCOUNT', dense, '-inf', '(' .. num(v))
end

local function value_of(stored)
  return Value.of(stored, shift)
end

local function better(stored)
  local v = value_of(stored)
  return members_better(v), values_better(v)
end

local function page(start, stop)
  if desc then
    return call('ZRANGE', key, start, stop, 'REV', 'WITHSCORES')
  end
  return call('ZRANGE', key, start, stop, 'WITHSCORES')
end

local function position(member)
  if desc then return call('ZREVRANK', key, member) end
  return call('ZRANK', key, member)
end

-- The metas of members[from..to] (HMGET in chunks: unpack has a stack limit).
local function metas_of(members, from, to)
  local out = {}
  for s = from, to, 1000 do
    local got = call('HMGET', meta, unpack(members, s, min(s + 999, to)))
    for i = 1, #got do out[s - from + i] = got[i] end
  end
  return out
end

local function listing(total, start, entries)
  local b, d = 0, 0
  if #entries > 0 then b, d = better(entries[2]) end
  local out = { total, start, b, d }
  if not meta then
    for i = 1, #entries do out[#out + 1] = entries[i] end
    return out
  end
  local names = {}
  for i = 1, #entries, 2 do names[#names + 1] = entries[i] end
  local metas, n = metas_of(names, 1, #names), 4
  for i = 1, #names do
    out[n + 1], out[n + 2], out[n + 3] = entries[2 * i - 1], entries[2 * i], metas[i]
    n = n + 3
  end
  return out
end

-- How many entries come strictly before (stored, member) in board order,
-- and whether that entry is on the board now: when it is not, the ties at
-- stored are searched by halving, a member read at a time.
local function before(stored_text, member)
  local stored = tonumber(stored_text)
  local now = call('ZSCORE', key, member)
  if now and tonumber(now) == stored then return position(member), true end
  local lo
  if desc then
    lo = call('ZCOUNT', key, '(' .. stored_text, '+inf')
  else
    lo = call('ZCOUNT', key, '-inf', '(' .. stored_text)
  end
  local hi = lo + call('ZCOUNT', key, stored_text, stored_text)
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    if Members.before(page(mid, mid)[1], member, desc) then lo = mid + 1 else hi = mid end
  end
  return lo, false
end

-- The shard's version (see the header).
local function version()
  return Value.version(versions)
end

-- Entries as (member, stored[, meta]) flattened into out.
local function push_entries(out, entries)
  local names = {}
  for i = 1, #entries, 2 do names[#names + 1] = entries[i] end
  local metas = meta and #names > 0 and metas_of(names, 1, #names)
  for i = 1, #names do
    out[#out + 1] = entries[2 * i - 1]
    out[#out + 1] = entries[2 * i]
    if meta then out[#out + 1] = metas[i] end
  end
end

local function members_better_or_equal(v)
  if desc then return call('ZCOUNT', key, num(v * shift), '+inf') end
  return call('ZCOUNT', key, '-inf', '(' .. num((v + 1) * shift))
end

local total = call('ZCARD', key)
if op == 'shard_top' then
  local out = { version(), total }
  local n = tonumber(ARGV[4])
  if n > 0 then push_entries(out, page(0, n - 1)) end
  return out
elseif op == 'shard_seek' then
  local at, present = before(ARGV[4], ARGV[5])
  local after_n, before_n = tonumber(ARGV[6]), tonumber(ARGV[7])
  local from = at
  if present then from = at + 1 end
  local after = {}
  if after_n > 0 then after = page(from, from + after_n - 1) end
  local out = { version(), total, at, present and 1 or 0, #after / 2 }
  push_entries(out, after)
  if before_n > 0 and at > 0 then push_entries(out, page(max(at - before_n, 0), at - 1)) end
  return out
elseif op == 'shard_counts' then
  local out = { version(), total }
  for i = 4, #ARGV, 3 do
    local v = tonumber(ARGV[i])
    out[#out + 1] = members_better(v)
    out[#out + 1] = members_better_or_equal(v)
    if ARGV[i + 2] ~= '' then
      local b = before(ARGV[i + 1], ARGV[i + 2])
      out[#out + 1] = b
    else
      out[#out + 1] = 0
    end
  end
  return out
elseif op == 'top' then
  local offset, limit = tonumber(ARGV[4]), tonumber(ARGV[5])
  -- limit 0: no entries (ZRANGE 0 -1 would read the whole board).
  if limit < 1 then return { total, offset, 0, 0 } end
  return listing(total, offset, page(offset, offset + limit - 1))
elseif op == 'player' then
  local member = ARGV[4]
  local stored, pos, hidden = call('ZSCORE', key, member), nil, 0
  if stored then
    pos = position(member)
  else
    stored = call('ZSCORE', shadow, member)
    if not stored then return false end
    pos, hidden = before(stored, member), 1
  end
  local b, d = better(stored)
  -- false, not nil: a nil would end the reply there.
  local m = false
  if meta then m = call('HGET', meta, member) end
  return { total, pos, b, d, stored, m, hidden }
elseif op == 'around' then
  local pos = position(ARGV[4])
  if not pos then return false end
  local radius = tonumber(ARGV[5])
  local start, stop = pos - radius, pos + radius
  if ARGV[6] == '1' then
    if start < 0 then start, stop = 0, stop - start end
    if stop > total - 1 then start, stop = start - (stop - (total - 1)), total - 1 end
  end
  return listing(total, max(start, 0), page(max(start, 0), stop))
elseif op == 'players' then
  -- Only the policy asked for is counted: one command per player found.
  local policy, out, n = ARGV[4], { total }, 1
  for s = 5, #ARGV, 1000 do
    local e = min(s + 999, #ARGV)
    local scores = call('ZMSCORE', key, unpack(ARGV, s, e))
    local metas = meta and metas_of(ARGV, s, e)
    for i = s, e do
      local stored = scores[i - s + 1]
      local count = 0
      if not stored then
        stored = false
      elseif policy == 'ordinal' then
        count = position(ARGV[i])
      elseif policy == 'dense' then
        count = values_better(value_of(stored))
      else
        count = members_better(value_of(stored))
      end
      out[n + 1], out[n + 2] = stored, count
      n = n + 2
      if meta then
        out[n + 1] = stored and metas[i - s + 1]
        n = n + 1
      end
    end
  end
  return out
elseif op == 'rank_of' then
  local v = tonumber(ARGV[4])
  return { total, members_better(v), members_better_or_equal(v), values_better(v) }
else
  local limit = tonumber(ARGV[6])
  local at, present = before(ARGV[4], ARGV[5])
  local start, stop
  if ARGV[7] == 'next' then
    if present then at = at + 1 end
    start, stop = at, at + limit - 1
  else
    start, stop = max(at - limit, 0), at - 1
  end
  if stop < start then return { total, start, 0, 0 } end
  return listing(total, start, page(start, stop))
end
