-- seal.lua: seals one period of ONE board tag, at most once, and reads its top.
--
-- Sealing marks the period in the tag's sealed hash (from then on apply.lua
-- refuses writes to it, so the live key is frozen too) and copies the live
-- board and its dense index into "...:final" and "_dense:...:final" (and, on
-- boards that keep metadata, its meta hash into "_meta:...:final"), expiring
-- with the period. The final key joins the tag's registry, so an erasure
-- reaches it. A second call changes nothing and answers the same top.
--
-- keys: live final live_dense final_dense sealed registry live_shadow final_shadow offsets final_versions live_meta? final_meta? live_rows? final_rows?
-- derives: (none)
-- KEYS[1] live period key     KEYS[2] its final key
-- KEYS[3] live dense index    KEYS[4] final dense index
-- KEYS[5] the tag's sealed hash    KEYS[6] the tag's registry
-- KEYS[7] live shadow (hidden players' values)    KEYS[8] final shadow
-- KEYS[9] the tag's offsets hash (its "registered" field: see registered.lua)
-- KEYS[10] the final key's version hash (its `seals` counter rises with the seal)
-- KEYS[11] live meta hash     KEYS[12] final meta hash (boards that keep
--   metadata, and boards ranked by several columns, whose meta hashes never
--   exist, so that their rows hashes come next)
-- KEYS[13] live rows hash     KEYS[14] final rows hash (boards ranked by
--   several columns: their members are bytes, which the worker reads back,
--   so ARGV[3] is 0 there)
-- ARGV[1] close time, ms      ARGV[2] EXPIREAT seconds, "0" for none
-- ARGV[3] how many entries to return    ARGV[4] "desc" or "asc"
-- ARGV[5] the sealed hash's field that says the period's top was published
--
-- Returns the error LOST, having done nothing, when the tag is not
-- registered (its data is gone); otherwise {sealed now (1/0), already
-- published (1/0), total, member, score, ...}, with (member, score, meta)
-- triples where KEYS[11] is given (meta false: none).
-- Hidden players are sealed in the final shadow, out of the snapshot and its top.

local live, final = KEYS[1], KEYS[2]
local versions, meta, final_meta, rows, final_rows = KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14]
-- A period of a tag that lost its data is not sealed: its final key would
-- freeze a board that misses every score before the loss.
local lost = Registered.check(KEYS[9])
if lost then return lost end
local newly = 0
if redis.call('HEXISTS', KEYS[5], live) == 0 then
  newly = 1
  redis.call('HSET', KEYS[5], live, ARGV[1])
  redis.call('HINCRBY', versions, 'seals', 1)
  Expiry.at(ARGV[2], { versions })
  redis.call('DEL', final, KEYS[4], KEYS[8])
  if meta then redis.call('DEL', final_meta) end
  if rows then
    -- Hidden players' rows too: their members are found through them.
    redis.call('DEL', final_rows)
    if redis.call('EXISTS', rows) == 1 then
      redis.call('COPY', rows, final_rows)
      Expiry.at(ARGV[2], { final_rows })
    end
  end
  if redis.call('EXISTS', KEYS[7]) == 1 then
    redis.call('COPY', KEYS[7], KEYS[8])
    Expiry.at(ARGV[2], { KEYS[8] })
    -- The registry lists the final key, through which admin.lua finds this shadow.
    redis.call('SADD', KEYS[6], final)
  end
  if redis.call('EXISTS', live) == 1 then
    redis.call('ZUNIONSTORE', final, 1, live)
    if redis.call('EXISTS', KEYS[3]) == 1 then
      redis.call('ZUNIONSTORE', KEYS[4], 1, KEYS[3])
    end
    if meta and redis.call('EXISTS', meta) == 1 then
      redis.call('COPY', meta, final_meta)
    end
    Expiry.at(ARGV[2], { final, KEYS[4], meta and final_meta or nil })
    redis.call('SADD', KEYS[6], final)
  end
end
local published = redis.call('HEXISTS', KEYS[5], ARGV[5])
local n = tonumber(ARGV[3])
local top = {}
if n < 1 then
  -- (ZRANGE 0 -1 would read the whole board.)
elseif ARGV[4] == 'desc' then
  top = redis.call('ZRANGE', final, 0, n - 1, 'REV', 'WITHSCORES')
else
  top = redis.call('ZRANGE', final, 0, n - 1, 'WITHSCORES')
end
local out = {newly, published, redis.call('ZCARD', final)}
if not meta then
  for _, v in ipairs(top) do out[#out + 1] = v end
  return out
end
local k = 3
for i = 1, #top, 2 do
  out[k + 1], out[k + 2], out[k + 3] = top[i], top[i + 1], redis.call('HGET', final_meta, top[i])
  k = k + 3
end
return out
