-- read.lua: the read API's queries, each one atomic, so a page, a rank and
-- the neighbours describe one instant.
--
-- Stored scores are packed: value = floor(stored / SHIFT) (see src/score.rs).
-- "Better" means higher on desc boards and lower on asc boards.
--
-- KEYS[1]   the period key
-- KEYS[2]   its dense index (one member per distinct value)
-- ARGV[1]   "top" | "player" | "around"
-- ARGV[2]   "desc" | "asc"
-- ARGV[3]   SHIFT
-- top:      ARGV[4] offset (0-based), ARGV[5] limit
-- player:   ARGV[4] member
-- around:   ARGV[4] member, ARGV[5] radius
--
-- Replies (better = members with a strictly better value than the first
-- entry's; dense_better = distinct values strictly better than it):
-- top:      { total, start, better, dense_better, member1, stored1, ... }
-- player:   false if absent, else { total, position (0-based), better, dense_better, stored }
-- around:   false if absent, else { total, start, better, dense_better, member1, stored1, ... }

local key, dense = KEYS[1], KEYS[2]
local op, order, shift = ARGV[1], ARGV[2], tonumber(ARGV[3])
local desc = order == 'desc'

local function value_of(stored)
  return math.floor(tonumber(stored) / shift)
end

local function better(stored)
  local v = value_of(stored)
  if desc then
    return redis.call('ZCOUNT', key, (v + 1) * shift, '+inf'), redis.call('ZCOUNT', dense, '(' .. v, '+inf')
  end
  return redis.call('ZCOUNT', key, '-inf', '(' .. (v * shift)), redis.call('ZCOUNT', dense, '-inf', '(' .. v)
end

local function page(start, stop)
  if desc then
    return redis.call('ZRANGE', key, start, stop, 'REV', 'WITHSCORES')
  end
  return redis.call('ZRANGE', key, start, stop, 'WITHSCORES')
end

local function position(member)
  if desc then return redis.call('ZREVRANK', key, member) end
  return redis.call('ZRANK', key, member)
end

local function listing(total, start, entries)
  local b, d = 0, 0
  if #entries > 0 then b, d = better(entries[2]) end
  local out = { total, start, b, d }
  for i = 1, #entries do out[#out + 1] = entries[i] end
  return out
end

local total = redis.call('ZCARD', key)
if op == 'top' then
  local offset, limit = tonumber(ARGV[4]), tonumber(ARGV[5])
  return listing(total, offset, page(offset, offset + limit - 1))
elseif op == 'player' then
  local stored = redis.call('ZSCORE', key, ARGV[4])
  if not stored then return false end
  local b, d = better(stored)
  return { total, position(ARGV[4]), b, d, stored }
else
  local pos = position(ARGV[4])
  if not pos then return false end
  local radius = tonumber(ARGV[5])
  local start = pos - radius
  if start < 0 then start = 0 end
  return listing(total, start, page(start, pos + radius))
end
