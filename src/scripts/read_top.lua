-- read_top.lua: one page of a board, read atomically.
--
-- KEYS[1]   the period key
-- ARGV[1]   "desc" or "asc" (which end is best)
-- ARGV[2]   offset (0-based)
-- ARGV[3]   limit
--
-- Returns { total, better, member1, score1, member2, score2, ... } where
-- `better` counts members strictly better than the page's first entry (0 on
-- an empty page), from which competition ranks of the page follow.
local key, order = KEYS[1], ARGV[1]
local offset, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local total = redis.call('ZCARD', key)
local page
if order == 'desc' then
  page = redis.call('ZRANGE', key, offset, offset + limit - 1, 'REV', 'WITHSCORES')
else
  page = redis.call('ZRANGE', key, offset, offset + limit - 1, 'WITHSCORES')
end
local better = 0
if #page > 0 then
  if order == 'desc' then
    better = redis.call('ZCOUNT', key, '(' .. page[2], '+inf')
  else
    better = redis.call('ZCOUNT', key, '-inf', '(' .. page[2])
  end
end
local out = { total, better }
for i = 1, #page do out[#out + 1] = page[i] end
return out
