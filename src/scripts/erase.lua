-- erase.lua: removes one player from every key of ONE board tag, atomically,
-- at most once per record and once per event id: the same offset check and
-- the same dedupe markers as apply.lua, so neither a replayed erasure nor a
-- producer's retry of it (same event id, later offset) can erase scores the
-- player earned after it.
--
-- KEYS[1]   the tag's offsets hash
-- KEYS[2]   the tag's registry of period keys (a set, filled by apply.lua)
-- ARGV[1]   field "<topic>:<partition>", ARGV[2] offset
-- ARGV[3]   the member (player id)
-- ARGV[4]   SHIFT of the board's packing (for the dense index and its value counts)
-- ARGV[5]   what the tag's period keys start with ("<prefix>:{tag}:"): the rest is the period id
-- ARGV[6]   dense index prefix ("<prefix>:{tag}:_dense:"), completed with a period id
-- ARGV[7]   value counts prefix ("<prefix>:{tag}:_dcount:"), likewise
-- ARGV[8]   event times prefix ("<prefix>:{tag}:_ts:"), likewise
-- ARGV[9]   the member's rate-limit window key
-- ARGV[10]  dedupe marker hash prefix ("<prefix>:{tag}:_seen:"), completed with n (see markers.lua)
-- ARGV[11]  dedupe ttl, seconds
-- ARGV[12]  the event's marker (16 bytes, see markers.lua)
-- ARGV[13]  metadata prefix ("<prefix>:{tag}:_meta:"), completed with a period id
--
-- Returns 1 erased (or nothing to erase), 2 duplicate event id, 3 redelivered offset.

local field, off_s, member = ARGV[1], ARGV[2], ARGV[3]
local shift, period_prefix = tonumber(ARGV[4]), ARGV[5]
local dense_prefix, counts_prefix, times_prefix, meta_prefix = ARGV[6], ARGV[7], ARGV[8], ARGV[13]
local last = redis.call('HGET', KEYS[1], field)
if last and tonumber(off_s) <= tonumber(last) then return 3 end
redis.call('HSET', KEYS[1], field, off_s)

-- The marker, in the hashes apply.lua keeps (see markers.lua, which the
-- worker puts before this script).
local markers = Markers.open(ARGV[10], tonumber(ARGV[11]))
if markers.seen({ ARGV[12] })[1] then return 2 end
markers.add(1)
markers.flush()

local prefix_len = #period_prefix + 1
for _, key in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if redis.call('EXISTS', key) == 0 then
    redis.call('SREM', KEYS[2], key)
  else
    local period = string.sub(key, prefix_len)
    local cur = redis.call('ZSCORE', key, member)
    if cur then
      redis.call('ZREM', key, member)
      local v = math.floor(tonumber(cur) / shift)
      local vs = string.format('%d', v)
      local counts = counts_prefix .. period
      if redis.call('HEXISTS', counts, vs) == 1 and redis.call('HINCRBY', counts, vs, -1) <= 0 then
        redis.call('HDEL', counts, vs)
      end
      local lo = v * shift
      if redis.call('ZCOUNT', key, lo, lo + shift - 1) == 0 then
        redis.call('ZREM', dense_prefix .. period, vs)
      end
    end
    redis.call('HDEL', times_prefix .. period, member)
    redis.call('HDEL', meta_prefix .. period, member)
  end
end
redis.call('DEL', ARGV[9])
return 1
