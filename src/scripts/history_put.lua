-- history_put.lua: records standings decided by the worker in ONE shard's
-- players' history. A sharded board's ranks need its shards merged, which
-- no one script can do on a cluster: src/schedule/history.rs merges the
-- shards' snapshots in board order, step by step, and hands each shard its
-- players' standings (what the history and best hashes hold:
-- lib/history.lua).
--
-- keys: history best history_registry offsets
-- derives: (none)
-- KEYS[1] the period's history hash   KEYS[2] the kind's best hash
-- KEYS[3] the tag's history registry  KEYS[4] the tag's offsets hash
-- ARGV[1] EXPIREAT seconds of the history hash ("0": none)
-- ARGV[2] the period id, as the best hash records it
-- ARGV[3] "1" on a period's first step: drop the expired history hashes
--         from the registry first
-- ARGV[4..] per player: member, "<ordinal>:<competition>:<total>:<stored>"
--
-- Returns the error LOST, having done nothing, when the tag is not
-- registered; otherwise the number of players recorded.

local lost = Registered.check(KEYS[4])
if lost then return lost end
local hist, best, registry = KEYS[1], KEYS[2], KEYS[3]
if ARGV[3] == '1' then History.prune(registry) end
local members, standings, ordinals = {}, {}, {}
for a = 4, #ARGV - 1, 2 do
  local n = #members + 1
  members[n], standings[n] = ARGV[a], ARGV[a + 1]
  ordinals[n] = tonumber(string.match(ARGV[a + 1], '^(%d+):'))
end
History.record(hist, best, registry, ARGV[1], ARGV[2], members, standings, ordinals)
return #members
