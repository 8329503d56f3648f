-- history.lua: one step of recording a sealed period's standings in its
-- players' history, on ONE board tag (src/schedule/history.rs runs the
-- steps after the seal).
--
-- A step walks the final board in board order from the position recorded
-- in the tag's sealed hash, at most `budget` entries, and for each player:
--   - records their standing in the period's history hash:
--     player -> "<ordinal>:<competition>:<total>:<stored>", the ranks a
--     player read of the sealed period answers (ordinal: the position in
--     board order; competition: one more than the players with a better
--     value), the members of the final board and the stored score;
--   - raises their best of the period's kind in the kind's best hash:
--     player -> "<ordinal>:<period id>", when this rank is better than the
--     one recorded (an equal rank keeps the earlier period).
-- Writing a step again writes the same values, so a step taken over after
-- a crash is harmless; the recorded position only saves the work.
--
-- The history hash expires with the period's snapshot; the best hashes
-- never do. Both are listed in the tag's history registry, which an
-- erasure walks (admin.lua); the first step drops from it the history
-- hashes that have expired.
--
-- KEYS[1] the final key     KEYS[2] the period's history hash
-- KEYS[3] the kind's best hash      KEYS[4] the tag's sealed hash
-- KEYS[5] the tag's history registry    KEYS[6] the tag's offsets hash
-- ARGV[1] the sealed hash's progress field (next position; "done" at the end)
-- ARGV[2] "desc" | "asc"    ARGV[3] SHIFT    ARGV[4] budget (entries per step)
-- ARGV[5] EXPIREAT seconds of the history hash ("0": none)
-- ARGV[6] the period id, as the best hash records it
--
-- Returns the error LOST, having done nothing, when the tag is not
-- registered; otherwise { done (1/0), entries recorded by this step }.

local final, hist, best, sealed, registry = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local field, desc, shift, budget = ARGV[1], ARGV[2] == 'desc', tonumber(ARGV[3]), tonumber(ARGV[4])
local expire_at, period = ARGV[5], ARGV[6]
local call, format, tonumber, unpack, min = redis.call, string.format, tonumber, unpack, math.min

-- Lua unpacks at most a few thousand values at once: commands over long
-- lists go in slices.
local SLICE = 1000
local function hset(key, list)
  for i = 1, #list, 2 * SLICE do call('HSET', key, unpack(list, i, min(i + 2 * SLICE - 1, #list))) end
end
local function hmget(key, fields)
  local out = {}
  for i = 1, #fields, SLICE do
    local got = call('HMGET', key, unpack(fields, i, min(i + SLICE - 1, #fields)))
    for k = 1, #got do out[i + k - 1] = got[k] end
  end
  return out
end

local lost = Registered.check(KEYS[6])
if lost then return lost end
local at = call('HGET', sealed, field)
if at == 'done' then return { 1, 0 } end
at = tonumber(at) or 0

if at == 0 then
  for _, k in ipairs(call('SMEMBERS', registry)) do
    if call('EXISTS', k) == 0 then call('SREM', registry, k) end
  end
end

local total = call('ZCARD', final)
local entries
if desc then
  entries = call('ZRANGE', final, at, at + budget - 1, 'REV', 'WITHSCORES')
else
  entries = call('ZRANGE', final, at, at + budget - 1, 'WITHSCORES')
end
local n = #entries / 2
if n > 0 then
  -- Competition rank: the first entry's by counting the better values;
  -- the others' from the entry before.
  local num = Value.fmt
  local function value(stored) return Value.of(stored, shift) end
  local first = value(tonumber(entries[2]))
  local better
  if desc then
    better = call('ZCOUNT', final, num((first + 1) * shift), '+inf')
  else
    better = call('ZCOUNT', final, '-inf', '(' .. num(first * shift))
  end
  local competition, last = better + 1, first
  local records, members = {}, {}
  for i = 1, n do
    local member, stored = entries[2 * i - 1], tonumber(entries[2 * i])
    local v = value(stored)
    local ordinal = at + i
    if v ~= last then competition, last = ordinal, v end
    records[#records + 1] = member
    records[#records + 1] = format('%d:%d:%d:', ordinal, competition, total) .. num(stored)
    members[i] = member
  end
  hset(hist, records)
  local was = hmget(best, members)
  local raised = {}
  for i = 1, n do
    local old = was[i] and tonumber(string.match(was[i], '^(%d+):'))
    if not old or at + i < old then
      raised[#raised + 1] = members[i]
      raised[#raised + 1] = format('%d:%s', at + i, period)
    end
  end
  hset(best, raised)
  Expiry.at(expire_at, { hist })
  call('SADD', registry, hist, best)
end

local done = at + n >= total
call('HSET', sealed, field, done and 'done' or tostring(at + n))
return { done and 1 or 0, n }
