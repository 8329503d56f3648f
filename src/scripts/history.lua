-- history.lua: one step of recording a sealed period's standings in its
-- players' history, on ONE board tag (src/schedule/history.rs runs the
-- steps after the seal).
--
-- A step walks the final board in board order from the position recorded
-- in the tag's sealed hash, at most `budget` entries, and records each
-- player's standing and raises their best of the period's kind (what they
-- hold: lib/history.lua). The recorded position only saves work: a step
-- written again writes the same values. The first step drops the expired
-- history hashes from the tag's history registry.
--
-- keys: final history best sealed history_registry offsets
-- derives: (none)
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
local call, format, tonumber = redis.call, string.format, tonumber

local lost = Registered.check(KEYS[6])
if lost then return lost end
local at = call('HGET', sealed, field)
if at == 'done' then return { 1, 0 } end
at = tonumber(at) or 0
if at == 0 then History.prune(registry) end

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
  local members, standings, ordinals = {}, {}, {}
  for i = 1, n do
    local member, stored = entries[2 * i - 1], tonumber(entries[2 * i])
    local v = value(stored)
    local ordinal = at + i
    if v ~= last then competition, last = ordinal, v end
    members[i], ordinals[i] = member, ordinal
    standings[i] = format('%d:%d:%d:', ordinal, competition, total) .. num(stored)
  end
  History.record(hist, best, registry, expire_at, period, members, standings, ordinals)
end

local done = at + n >= total
call('HSET', sealed, field, done and 'done' or tostring(at + n))
return { done and 1 or 0, n }
