-- apply.lua: applies a batch of events to ONE board tag (one hash slot), atomically.
--
-- For each event, in order: a record at or below the tag's recorded offset for
-- its topic-partition is a redelivery and changes nothing; otherwise the
-- offset advances, the dedupe marker is set with SET NX EX, and only when the
-- marker is new are the period writes made. A marker is never set without its
-- writes, nor writes made without the marker, because the script is atomic.
--
-- Stored scores are packed: stored = value * SHIFT + tie (see src/score.rs),
-- SHIFT = 1 without a tie-break. Each period key has a dense index (a zset of
-- its distinct values), updated here whenever a member's value changes, so
-- dense ranks are read without scanning the board.
--
-- KEYS[1]             the tag's offsets hash (field "<topic>:<partition>" -> last applied offset)
-- KEYS[1 + j]         period key j, j = 1..P
-- KEYS[1 + P + j]     dense index of period key j
-- KEYS[1 + 2P + i]    the dedupe marker of event i
--
-- ARGV[1]             op: "sum" (add to the total), "gt" (keep the highest), "lt" (keep the lowest)
-- ARGV[2]             dedupe ttl, seconds
-- ARGV[3]             refusal key prefix ("<prefix>:{tag}:_refused:")
-- ARGV[4]             SHIFT (2^tie bits)
-- ARGV[5]             largest |value| allowed
-- ARGV[6]             P
-- ARGV[6 + j]         EXPIREAT seconds of period key j (and its index), "0" for none
-- then, per event:    field, offset, member, num, tie, W, then W period-key indexes (1-based)
--                     num: the delta for "sum", the packed stored score for "gt"/"lt"
--
-- Returns one integer per event:
--   1 applied, 2 duplicate event_id (marker present), 3 redelivered offset,
--   4 refused: score_out_of_range (a total would pass the allowed value).
-- A refusal is remembered (under the refusal prefix, EX ttl) so that a
-- redelivery of the record reports the same refusal, not a duplicate.

local op = ARGV[1]
local ttl = ARGV[2]
local refused_prefix = ARGV[3]
local shift = tonumber(ARGV[4])
local maxv = tonumber(ARGV[5])
local np = tonumber(ARGV[6])
local offsets_key = KEYS[1]

local function value_of(stored)
  return math.floor(stored / shift)
end

local function fmt(n)
  return string.format('%d', n)
end

-- Keeps the dense index of period key j exact after a member moved from
-- value old_v (false: absent) to new_v. Runs after the board write.
local function reindex(j, old_v, new_v)
  if old_v == new_v then return end
  local dense = KEYS[1 + np + j]
  if old_v then
    local lo = old_v * shift
    if redis.call('ZCOUNT', KEYS[1 + j], lo, lo + shift - 1) == 0 then
      redis.call('ZREM', dense, fmt(old_v))
    end
  end
  redis.call('ZADD', dense, new_v, fmt(new_v))
end

local last_num, last_str, dirty, touched, out = {}, {}, {}, {}, {}
local a = 7 + np
local nargs = #ARGV
local i = 0
while a <= nargs do
  i = i + 1
  local field, off_s, member, num, tie = ARGV[a], ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local first = a + 6
  a = first + tonumber(ARGV[a + 5])
  local off = tonumber(off_s)
  local last = last_num[field]
  if last == nil then
    local v = redis.call('HGET', offsets_key, field)
    if v then last = tonumber(v) else last = -1 end
    last_num[field] = last
  end
  if off <= last then
    local r = redis.call('GET', refused_prefix .. field .. ':' .. off_s)
    if r then out[i] = tonumber(r) else out[i] = 3 end
  else
    last_num[field], last_str[field], dirty[field] = off, off_s, true
    local code = 1
    local marker = KEYS[1 + 2 * np + i]
    if not redis.call('SET', marker, '1', 'NX', 'EX', ttl) then
      code = 2
    elseif op == 'sum' then
      local olds = {}
      for w = first, a - 1 do
        local j = tonumber(ARGV[w])
        local cur = redis.call('ZSCORE', KEYS[1 + j], member)
        local old_v = false
        if cur then old_v = value_of(tonumber(cur)) end
        local total = (old_v or 0) + num
        if total > maxv or total < -maxv then code = 4; break end
        olds[w] = old_v
      end
      if code == 4 then
        redis.call('DEL', marker)
      else
        for w = first, a - 1 do
          local j = tonumber(ARGV[w])
          local total = (olds[w] or 0) + num
          redis.call('ZADD', KEYS[1 + j], total * shift + tie, member)
          reindex(j, olds[w], total)
          touched[j] = true
        end
      end
    else
      for w = first, a - 1 do
        local j = tonumber(ARGV[w])
        local k = KEYS[1 + j]
        local cur = redis.call('ZSCORE', k, member)
        local better
        if not cur then
          better = true
        elseif op == 'gt' then
          better = num > tonumber(cur)
        else
          better = num < tonumber(cur)
        end
        if better then
          redis.call('ZADD', k, num, member)
          local old_v = false
          if cur then old_v = value_of(tonumber(cur)) end
          reindex(j, old_v, value_of(num))
        end
        touched[j] = true
      end
    end
    if code >= 4 then
      redis.call('SET', refused_prefix .. field .. ':' .. off_s, code, 'EX', ttl)
    end
    out[i] = code
  end
end
for field in pairs(dirty) do
  redis.call('HSET', offsets_key, field, last_str[field])
end
for j in pairs(touched) do
  local at = ARGV[6 + j]
  if at ~= '0' then
    redis.call('EXPIREAT', KEYS[1 + j], at)
    redis.call('EXPIREAT', KEYS[1 + np + j], at)
  end
end
return out
