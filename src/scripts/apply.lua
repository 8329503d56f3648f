-- apply.lua: applies a batch of events to ONE board tag (one hash slot), atomically.
--
-- For each event, in order: a record at or below the tag's recorded offset for
-- its topic-partition is a redelivery and changes nothing; otherwise the
-- offset advances, the dedupe marker is set with SET NX EX, and only when the
-- marker is new (and the rate limit and value range allow) are the period
-- writes made. A marker is never set without its writes, nor writes made
-- without the marker, because the script is atomic and checks everything
-- that can refuse an event before its first write.
--
-- Stored scores are packed: stored = value * SHIFT + tie (see src/score.rs),
-- SHIFT = 1 without a tie-break. Each period key has a dense index (a zset of
-- its distinct values), kept exact here so dense ranks are read without
-- scanning the board: the values members move to and leave are collected
-- during the call and settled once per period key at its end.
--
-- KEYS[1]             the tag's offsets hash (field "<topic>:<partition>" -> last applied offset)
-- KEYS[1 + j]         period key j, j = 1..P
-- KEYS[1 + P + j]     dense index of period key j
-- KEYS[1 + 2P + j]    op "latest" only: hash member -> event time of its value in period key j
-- KEYS[1 + AP + i]    the dedupe marker of event i (AP = 3P for "latest", 2P otherwise)
-- KEYS[#KEYS]         boards that seal periods only: the tag's sealed hash
--                     (period key -> close time); a sealed period takes no write
--
-- ARGV[1]             op: "sum" (add to the total), "gt" / "lt" (keep the best), "latest" (newest event wins)
-- ARGV[2]             dedupe ttl, seconds
-- ARGV[3]             refusal key prefix ("<prefix>:{tag}:_refused:")
-- ARGV[4]             SHIFT (2^tie bits)
-- ARGV[5]             largest |value| allowed
-- ARGV[6]             "desc" or "asc": which end of a board is best
-- ARGV[7]             top-K: members kept per period key, 0 for no limit
-- ARGV[8]             rate limit: events per window per member, 0 for none
-- ARGV[9]             rate limit: window, ms
-- ARGV[10]            rate limit key prefix ("<prefix>:{tag}:_rl:")
-- ARGV[11]            "1" to keep the dense indexes, "0" for a board without dense ranks
-- ARGV[12]            "1" if the board seals its periods (the last key is the sealed hash)
-- ARGV[13]            P
-- ARGV[13 + j]        EXPIREAT seconds of period key j (and its index), "0" for none
-- then, per event:    field, offset, member, num, tie, ts, W, then W period-key indexes (1-based)
--                     num: the delta for "sum", the packed stored score otherwise;
--                     ts: the event time, epoch ms
--
-- Returns one integer per event:
--   1 applied, 2 duplicate event_id (marker present), 3 redelivered offset,
--   4 refused: score_out_of_range (a total would pass the allowed value),
--   5 refused: rate_limited,
--   6 refused: period_closed (every period of the event is sealed already).
-- Every period key written is added to the tag's registry set
-- ("<prefix>:{tag}:_keys"), which erase.lua walks.
-- A refusal is remembered (under the refusal prefix, EX ttl) so that a
-- redelivery of the record reports the same refusal, not a duplicate.
--
-- Fast path for "sum" without a tie-break (SHIFT = 1): while no value on the
-- tag has passed half the allowed range, no sum of a value and a delta within
-- half the range can leave it, so ZINCRBY is used without reading first, and
-- the old value is the result minus the delta (exact in that range). The
-- first value past half the range sets the tag's guard key
-- ("<refusal prefix minus _refused:>_big"), and from then on the tag reads
-- each score before writing, as the exact range check needs.

local op = ARGV[1]
local ttl = ARGV[2]
local refused_prefix = ARGV[3]
local shift = tonumber(ARGV[4])
local maxv = tonumber(ARGV[5])
local desc = ARGV[6] == 'desc'
local top_k = tonumber(ARGV[7])
local rate_events = tonumber(ARGV[8])
local rate_window = tonumber(ARGV[9])
local rl_prefix = ARGV[10]
local dense_on = ARGV[11] == '1'
local seal_on = ARGV[12] == '1'
local np = tonumber(ARGV[13])
local offsets_key = KEYS[1]
local half = math.floor(maxv / 2)
local guard_key = string.sub(refused_prefix, 1, #refused_prefix - #'_refused:') .. '_big'
local fast_sum = op == 'sum' and shift == 1 and not redis.call('GET', guard_key)
local marker_base = 1 + 2 * np
if op == 'latest' then marker_base = 1 + 3 * np end

local function value_of(stored)
  return math.floor(stored / shift)
end

local function fmt(n)
  return string.format('%d', n)
end

-- Drops value v from period key j's dense index if no member holds it any more.
local function release(j, v)
  if not dense_on then return end
  local lo = v * shift
  if redis.call('ZCOUNT', KEYS[1 + j], lo, lo + shift - 1) == 0 then
    redis.call('ZREM', KEYS[1 + np + j], fmt(v))
  end
end

-- Dense-index changes are collected per period key during the batch and
-- applied once at the end (see settle): gained[j][v] for values members
-- moved to, vacated[j][v] for values they left.
local gained, vacated = {}, {}

-- Records that a member of period key j moved from value old_v (false:
-- absent) to new_v.
local function reindex(j, old_v, new_v)
  if old_v == new_v or not dense_on then return end
  if old_v then
    vacated[j] = vacated[j] or {}
    vacated[j][old_v] = true
  end
  gained[j] = gained[j] or {}
  gained[j][new_v] = true
end

-- Makes period key j's dense index exact again: a value some member moved
-- to and none left is held for sure; a value someone left is held if the
-- board still counts a member with it. Adds and removals are variadic.
local function settle(j)
  local add, rem = {}, {}
  local function flush()
    if #add > 0 then redis.call('ZADD', KEYS[1 + np + j], unpack(add)); add = {} end
    if #rem > 0 then redis.call('ZREM', KEYS[1 + np + j], unpack(rem)); rem = {} end
  end
  local left = vacated[j] or {}
  for v in pairs(gained[j] or {}) do
    if not left[v] then
      add[#add + 1] = v
      add[#add + 1] = fmt(v)
      if #add >= 1000 then flush() end
    end
  end
  for v in pairs(left) do
    local lo = v * shift
    if redis.call('ZCOUNT', KEYS[1 + j], lo, lo + shift - 1) == 0 then
      rem[#rem + 1] = fmt(v)
    elseif gained[j] and gained[j][v] then
      add[#add + 1] = v
      add[#add + 1] = fmt(v)
    end
    if #add >= 1000 or #rem >= 1000 then flush() end
  end
  flush()
end

-- Top-K: keeps the best top_k members of period key j.
local function trim(j)
  local k = KEYS[1 + j]
  local card = redis.call('ZCARD', k)
  if card <= top_k then return end
  local victims
  if desc then
    victims = redis.call('ZRANGE', k, 0, card - top_k - 1, 'WITHSCORES')
    redis.call('ZREMRANGEBYRANK', k, 0, card - top_k - 1)
  else
    victims = redis.call('ZRANGE', k, top_k, -1, 'WITHSCORES')
    redis.call('ZREMRANGEBYRANK', k, top_k, -1)
  end
  for v = 2, #victims, 2 do
    release(j, value_of(tonumber(victims[v])))
  end
end

-- The sliding window (ts - window, ts] of admitted events: true if one more fits.
local function admit(member, ts, id)
  local rl = rl_prefix .. member
  if redis.call('ZCOUNT', rl, '(' .. (ts - rate_window), ts) >= rate_events then
    return false
  end
  redis.call('ZADD', rl, ts, id)
  -- Entries older than two windows can no longer matter, unless events
  -- arrive more than a window out of order; this bounds the set's size.
  redis.call('ZREMRANGEBYSCORE', rl, '-inf', '(' .. (ts - 2 * rate_window))
  redis.call('PEXPIRE', rl, 2 * rate_window + 86400000)
  return true
end

-- A sealed period is frozen: its final snapshot was taken from it.
local sealed = {}
if seal_on then
  for j = 1, np do
    sealed[j] = redis.call('HEXISTS', KEYS[#KEYS], KEYS[1 + j]) == 1
  end
end

local last_num, last_str, dirty, touched, out = {}, {}, {}, {}, {}
local a = 14 + np
local nargs = #ARGV
local i = 0
while a <= nargs do
  i = i + 1
  local field, off_s, member = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  local num, tie, ts = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  local first = a + 7
  a = first + tonumber(ARGV[a + 6])
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
    local marker = KEYS[marker_base + i]
    local olds = {}
    -- Decided once per event: every period of the event takes the same path.
    local fast = fast_sum and num <= half and num >= -half
    if not redis.call('SET', marker, '1', 'NX', 'EX', ttl) then
      code = 2
    else
      if op == 'sum' and not fast then
        for w = first, a - 1 do
          local j = tonumber(ARGV[w])
          local cur = redis.call('ZSCORE', KEYS[1 + j], member)
          local old_v = false
          if cur then old_v = value_of(tonumber(cur)) end
          local total = (old_v or 0) + num
          if total > maxv or total < -maxv then code = 4; break end
          olds[w] = old_v
        end
      end
      if code == 1 and seal_on then
        local open = false
        for w = first, a - 1 do
          if not sealed[tonumber(ARGV[w])] then open = true end
        end
        if not open then code = 6 end
      end
      if code == 1 and rate_events > 0 and not admit(member, ts, field .. ':' .. off_s) then
        code = 5
      end
      if code ~= 1 then redis.call('DEL', marker) end
    end
    if code == 1 then
      for w = first, a - 1 do
        local j = tonumber(ARGV[w])
        local k = KEYS[1 + j]
        if sealed[j] then
          -- skipped: the event still counts on the board's open periods
        elseif op == 'sum' and fast then
          local total = tonumber(redis.call('ZINCRBY', k, num, member))
          if total > half or total < -half then
            redis.call('SET', guard_key, '1')
            fast_sum = false
          end
          if num == 0 then
            -- The member may be new: its value must be in the index.
            reindex(j, false, total)
          else
            -- A new member's old value reads as 0: releasing 0 is harmless.
            reindex(j, total - num, total)
          end
        elseif op == 'sum' then
          local total = (olds[w] or 0) + num
          redis.call('ZADD', k, total * shift + tie, member)
          if total > half or total < -half then
            redis.call('SET', guard_key, '1')
            fast_sum = false
          end
          reindex(j, olds[w], total)
        elseif op == 'latest' then
          local times = KEYS[1 + 2 * np + j]
          local seen = redis.call('HGET', times, member)
          if not seen or ts > tonumber(seen) then
            local cur = redis.call('ZSCORE', k, member)
            redis.call('ZADD', k, num, member)
            redis.call('HSET', times, member, ts)
            local old_v = false
            if cur then old_v = value_of(tonumber(cur)) end
            reindex(j, old_v, value_of(num))
          end
        elseif not dense_on then
          if op == 'gt' then
            redis.call('ZADD', k, 'GT', num, member)
          else
            redis.call('ZADD', k, 'LT', num, member)
          end
        else
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
        end
        if not sealed[j] then touched[j] = true end
      end
    elseif code >= 4 then
      redis.call('SET', refused_prefix .. field .. ':' .. off_s, code, 'EX', ttl)
    end
    out[i] = code
  end
end
for field in pairs(dirty) do
  redis.call('HSET', offsets_key, field, last_str[field])
end
local registry = string.sub(refused_prefix, 1, #refused_prefix - #'_refused:') .. '_keys'
for j in pairs(touched) do
  -- The registry lets an erasure find every period key of the tag.
  redis.call('SADD', registry, KEYS[1 + j])
  if dense_on then settle(j) end
  if top_k > 0 then trim(j) end
  local at = ARGV[13 + j]
  if at ~= '0' then
    redis.call('EXPIREAT', KEYS[1 + j], at)
    if dense_on then redis.call('EXPIREAT', KEYS[1 + np + j], at) end
    if op == 'latest' then redis.call('EXPIREAT', KEYS[1 + 2 * np + j], at) end
  end
end
return out
