-- read_player.lua: one player's score and rank, read atomically.
--
-- KEYS[1]   the period key
-- ARGV[1]   "desc" or "asc"
-- ARGV[2]   the member
--
-- Returns false if the member is absent (unranked), else
-- { score, ordinal_position (0-based), strictly_better, total }.
local key, order, member = KEYS[1], ARGV[1], ARGV[2]
local score = redis.call('ZSCORE', key, member)
if not score then return false end
local pos, better
if order == 'desc' then
  pos = redis.call('ZREVRANK', key, member)
  better = redis.call('ZCOUNT', key, '(' .. score, '+inf')
else
  pos = redis.call('ZRANK', key, member)
  better = redis.call('ZCOUNT', key, '-inf', '(' .. score)
end
return { score, pos, better, redis.call('ZCARD', key) }
