-- Records offsets in a consumer group's deployment marker (keys::deploy_key),
-- checking first that Redis still holds what this worker recorded before.
--
-- keys: marker
-- derives: (none)
-- KEYS[1]   the marker: "<topic>:<partition>" -> offset
-- ARGV      triples: field, the offset this worker last recorded for it
--           ("-1": none), the offset about to be stored
--
-- A field below what this worker recorded (or gone) means Redis lost data
-- since (a restart without persistence, a failover that lost writes): the
-- script writes nothing and returns { field, found (-1: none), expected, ... }.
-- Otherwise each field is raised to its new offset (never lowered: after a
-- rebalance another worker of the group may have recorded more) and the
-- reply is empty.

local call = redis.call
local lost = {}
local current = {}
for i = 1, #ARGV, 3 do
  local field, expected = ARGV[i], tonumber(ARGV[i + 1])
  local found = tonumber(call('HGET', KEYS[1], field) or '-1')
  current[i] = found
  if expected >= 0 and found < expected then
    lost[#lost + 1] = field
    lost[#lost + 1] = string.format('%d', found)
    lost[#lost + 1] = string.format('%d', expected)
  end
end
if #lost > 0 then return lost end
for i = 1, #ARGV, 3 do
  local new = tonumber(ARGV[i + 2])
  if new > current[i] then call('HSET', KEYS[1], ARGV[i], ARGV[i + 2]) end
end
return {}
