-- apply.lua: applies a batch of events to ONE board tag (one hash slot), atomically.
--
-- For each event, in order: a record at or below the tag's recorded offset for
-- its topic-partition is a redelivery and changes nothing; otherwise the
-- offset advances, the dedupe marker is set with SET NX EX, and only when the
-- marker is new are the period writes made. A marker is never set without its
-- writes, nor writes made without the marker, because the script is atomic.
--
-- KEYS[1]             the tag's offsets hash (field "<topic>:<partition>" -> last applied offset)
-- KEYS[2 .. 1+P]      the period keys the batch writes (P of them)
-- KEYS[1+P+i]         the dedupe marker of event i
--
-- ARGV[1]             op: "sum" (ZINCRBY), "gt" (ZADD GT), "lt" (ZADD LT)
-- ARGV[2]             dedupe ttl, seconds
-- ARGV[3]             refusal key prefix ("<prefix>:{tag}:_refused:")
-- ARGV[4]             P
-- ARGV[4+j]           EXPIREAT seconds of period key j, "0" for none
-- then, per event:    field, offset, member, score, W, W period-key indexes (1-based)
--
-- Returns one integer per event:
--   1 applied, 2 duplicate event_id (marker present), 3 redelivered offset,
--   4 refused: score_out_of_range (a sum would leave +-(2^53-1)).
-- A refusal is remembered (under the refusal prefix, EX ttl) so that a
-- redelivery of the record reports the same refusal, not a duplicate.

local op = ARGV[1]
local ttl = ARGV[2]
local refused_prefix = ARGV[3]
local np = tonumber(ARGV[4])
local MAX = 9007199254740991
local offsets_key = KEYS[1]

local last_num, last_str, dirty, touched, out = {}, {}, {}, {}, {}
local a = 5 + np
local nargs = #ARGV
local i = 0
while a <= nargs do
  i = i + 1
  local field, off_s, member, score = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local first = a + 5
  a = first + tonumber(ARGV[a + 4])
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
    local marker = KEYS[1 + np + i]
    if not redis.call('SET', marker, '1', 'NX', 'EX', ttl) then
      code = 2
    elseif op == 'sum' then
      local delta = tonumber(score)
      for j = first, a - 1 do
        local cur = redis.call('ZSCORE', KEYS[1 + tonumber(ARGV[j])], member)
        local total = (cur and tonumber(cur) or 0) + delta
        if total > MAX or total < -MAX then code = 4; break end
      end
      if code == 4 then redis.call('DEL', marker) end
    end
    if code == 1 then
      for j = first, a - 1 do
        local idx = tonumber(ARGV[j])
        local k = KEYS[1 + idx]
        if op == 'sum' then
          redis.call('ZINCRBY', k, score, member)
        elseif op == 'gt' then
          redis.call('ZADD', k, 'GT', score, member)
        else
          redis.call('ZADD', k, 'LT', score, member)
        end
        touched[idx] = true
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
for idx in pairs(touched) do
  local at = ARGV[4 + idx]
  if at ~= '0' then redis.call('EXPIREAT', KEYS[1 + idx], at) end
end
return out
