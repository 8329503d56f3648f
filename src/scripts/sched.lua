-- sched.lua: the scheduler's due work and the partitions' watermarks, all
-- under one hash tag ("<prefix>:{.sched}"), so each call is atomic.
--
-- keys: due lease watermarks
-- derives: (none)
-- KEYS[1] due zset (job -> due, ms), KEYS[2] lease zset (job -> claim lapses, ms),
-- KEYS[3] watermark hash ("<topic>:<partition>" -> record time, ms).
-- Times are Redis's own clock (TIME), so workers with skewed clocks agree.
--
-- ARGV[1] = "enqueue", then pairs job, due: adds each job that is neither
--           due nor claimed. Returns how many were added.
-- ARGV[1] = "advance", then pairs job, due: makes each job due by then at
--           the latest (added if absent; one claimed meanwhile re-reads what
--           it needs when it runs). Returns how many were moved or added.
-- ARGV[1] = "claim", ARGV[2] lease ms, ARGV[3] most jobs: first gives every
--           lapsed claim (its worker died or stalled) back as due now, then
--           claims up to that many due jobs. Returns job, token, job, token...
--           The token is the claim's lapse time: only its holder can finish.
-- ARGV[1] = "finish", ARGV[2] job, ARGV[3] token, ARGV[4] next due ms ("0":
--           done). Returns 1, or 0 if the claim had lapsed and was taken over.
-- ARGV[1] = "watermark", then pairs field, ms: raises each field, never lowers it.

local op = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

if op == 'enqueue' then
  local added = 0
  for a = 2, #ARGV, 2 do
    local job = ARGV[a]
    if not redis.call('ZSCORE', KEYS[1], job) and not redis.call('ZSCORE', KEYS[2], job) then
      redis.call('ZADD', KEYS[1], ARGV[a + 1], job)
      added = added + 1
    end
  end
  return added
elseif op == 'advance' then
  local moved = 0
  for a = 2, #ARGV, 2 do
    if not redis.call('ZSCORE', KEYS[2], ARGV[a]) then
      moved = moved + redis.call('ZADD', KEYS[1], 'LT', 'CH', ARGV[a + 1], ARGV[a])
    end
  end
  return moved
elseif op == 'claim' then
  local lease, most = tonumber(ARGV[2]), tonumber(ARGV[3])
  for _, job in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do
    redis.call('ZREM', KEYS[2], job)
    redis.call('ZADD', KEYS[1], now, job)
  end
  local out = {}
  for _, job in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, most)) do
    local token = now + lease
    redis.call('ZREM', KEYS[1], job)
    redis.call('ZADD', KEYS[2], token, job)
    out[#out + 1] = job
    out[#out + 1] = string.format('%d', token)
  end
  return out
elseif op == 'finish' then
  local held = redis.call('ZSCORE', KEYS[2], ARGV[2])
  if not held or tonumber(held) ~= tonumber(ARGV[3]) then return 0 end
  redis.call('ZREM', KEYS[2], ARGV[2])
  if ARGV[4] ~= '0' then redis.call('ZADD', KEYS[1], ARGV[4], ARGV[2]) end
  return 1
elseif op == 'watermark' then
  for a = 2, #ARGV, 2 do
    local cur = redis.call('HGET', KEYS[3], ARGV[a])
    if not cur or tonumber(ARGV[a + 1]) > tonumber(cur) then
      redis.call('HSET', KEYS[3], ARGV[a], ARGV[a + 1])
    end
  end
  return 1
end
return redis.error_reply('sched.lua: unknown op ' .. tostring(op))
