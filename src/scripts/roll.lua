-- roll.lua: recomputes one rolling board of ONE board tag from its daily keys,
-- atomically: readers see the old union or the new one, never a mix.
--
-- KEYS[1] the rolling key    KEYS[2] its dense index    KEYS[3] the tag's registry
-- KEYS[3 + d] daily key d, d = 1..days (missing days count as empty)
-- ARGV[1] SUM | MAX | MIN    ARGV[2] SHIFT (packing)   ARGV[3] "1": keep the dense index
-- ARGV[4] EXPIREAT seconds   ARGV[5] top-K (0: none)   ARGV[6] "desc" or "asc"
--
-- SUM is exact only while every partial sum stays within 2^53: the script
-- first bounds the sum of each day's largest |value| and, past 2^53 - 1,
-- changes nothing and returns -1. Otherwise it returns the union's size
-- (0 deletes the rolling key, as ZUNIONSTORE does).

local agg, shift, dense_on = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local top_k, desc = tonumber(ARGV[5]), ARGV[6] == 'desc'
local dest, dense = KEYS[1], KEYS[2]
local args = {dest, #KEYS - 3}
for d = 4, #KEYS do args[#args + 1] = KEYS[d] end

if agg == 'SUM' then
  local bound = 0
  for d = 4, #KEYS do
    local lo = redis.call('ZRANGE', KEYS[d], 0, 0, 'WITHSCORES')
    local hi = redis.call('ZRANGE', KEYS[d], -1, -1, 'WITHSCORES')
    local m = 0
    if lo[2] then m = math.abs(tonumber(lo[2])) end
    if hi[2] and math.abs(tonumber(hi[2])) > m then m = math.abs(tonumber(hi[2])) end
    bound = bound + m
  end
  if bound > 9007199254740991 then return -1 end
end

args[#args + 1] = 'AGGREGATE'
args[#args + 1] = agg
local card = redis.call('ZUNIONSTORE', unpack(args))
if top_k > 0 and card > top_k then
  if desc then
    redis.call('ZREMRANGEBYRANK', dest, 0, card - top_k - 1)
  else
    redis.call('ZREMRANGEBYRANK', dest, top_k, -1)
  end
  card = top_k
end

-- The dense index: one member per distinct value, rebuilt from the union.
redis.call('DEL', dense)
if dense_on and card > 0 then
  local seen, batch = {}, {}
  local scores = redis.call('ZRANGE', dest, 0, -1, 'WITHSCORES')
  for i = 2, #scores, 2 do
    local v = math.floor(tonumber(scores[i]) / shift)
    if not seen[v] then
      seen[v] = true
      batch[#batch + 1] = v
      batch[#batch + 1] = string.format('%d', v)
      if #batch >= 1000 then
        redis.call('ZADD', dense, unpack(batch))
        batch = {}
      end
    end
  end
  if #batch > 0 then redis.call('ZADD', dense, unpack(batch)) end
end
if card > 0 then
  redis.call('EXPIREAT', dest, ARGV[4])
  if dense_on then redis.call('EXPIREAT', dense, ARGV[4]) end
  redis.call('SADD', KEYS[3], dest)
end
return card
