-- topk.lua: boards that keep only their best K members.
--
-- "Best" is the high end on "desc" boards and the low end on "asc" ones.

local TopK = {}
do
  local call, min = redis.call, math.min

  -- Drops the members of zset key past its best k (at most `most` of them,
  -- the worst first; nil for all) and returns them as a flat list of
  -- member, stored score. The caller takes them out of what it keeps beside
  -- the key (dense index, metadata).
  function TopK.trim(key, k, desc, most)
    if k <= 0 then return {} end
    local excess = call('ZCARD', key) - k
    if excess <= 0 then return {} end
    if most then excess = min(excess, most) end
    local from, to = 0, excess - 1
    if not desc then from, to = -excess, -1 end
    local victims = call('ZRANGE', key, from, to, 'WITHSCORES')
    call('ZREMRANGEBYRANK', key, from, to)
    return victims
  end
end
