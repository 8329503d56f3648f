-- settle.lua: one step of a league round's settlement on ONE board tag.
-- The worker decides what a step writes (src/schedule/league.rs, from the
-- sealed round; the rules are src/board/league.rs); this script writes it
-- only where the settlement stands, and moves it on in the same atomic
-- call, so a crash between steps, a second worker or a re-run repeats no
-- step and skips none.
--
-- Where a settlement stands: field <round>:step of the tag's settlements
-- hash ("c:<tier>:<n>" the cohorts from cohort n of that tier on,
-- "i:<k>" the previous round's players from the k-th on, "p" placing,
-- "done"; absent: "c:0:1").
--
-- keys by name: offsets state tiers overrides results registry cohorts open pending
-- derives: (none)
-- ARGV[1] the header, a MessagePack map:
--   op       "write": players' next tiers (and their results); "place": the
--            next round's waiting players join its cohorts, in arrival
--            order (league.lua), and once none waits the round is settled
--   round    the round's id     at   where the step must find the settlement
--   next     ("write") where it leaves it
--   offsets, state, tiers, overrides   KEYS indexes of the tag's offsets
--            hash, settlements hash, tiers hash and player_tier_set's hash
--   results  ("write") KEYS index of the round's results hash
--   registry the tag's registry of round keys (erasure walks it)
--   expire_at  EXPIREAT seconds of the round's results ("write") or of the
--            next round's keys ("place"); 0: none
--   cohorts, open, pending  ("place", when there is a next round) KEYS
--            indexes of the next round's keys
--   size, count, max   ("place") players per cohort, tiers, most to place now
-- ARGV[2]  ("write") a MessagePack array of [player, tier, result]: the
--          tier of the player's next placement (unless player_tier_set
--          gave one, which wins) and their result in the round ("" for none)
--
-- Returns the error LOST, having done nothing, when the tag is not
-- registered; -1 when the settlement is not at `at` (nothing written);
-- otherwise 0 ("write"), or how many still wait ("place").

local h = cmsgpack.unpack(ARGV[1])
local lost = Registered.check(KEYS[h.offsets])
if lost then return lost end
local call = redis.call
local state, step = KEYS[h.state], h.round .. ':step'
local now = call('HGET', state, step) or 'c:0:1'
if now ~= h.at then return -1 end

if h.op == 'write' then
  local items = cmsgpack.unpack(ARGV[2])
  local tiers, results = {}, {}
  for _, it in ipairs(items) do
    local given = call('HGET', KEYS[h.overrides], it[1])
    tiers[#tiers + 1], tiers[#tiers + 2] = it[1], given or it[2]
    if it[3] ~= '' then results[#results + 1], results[#results + 2] = it[1], it[3] end
  end
  if #tiers > 0 then Calls.variadic('HSET', KEYS[h.tiers], tiers, 2) end
  if #results > 0 then
    Calls.variadic('HSET', KEYS[h.results], results, 2)
    Expiry.at(h.expire_at, { KEYS[h.results] })
    call('SADD', KEYS[h.registry], KEYS[h.results])
  end
  call('HSET', state, step, h.next)
  return 0
end

-- "place"
local left = 0
if h.pending then
  local r = {
    cohorts = KEYS[h.cohorts], open = KEYS[h.open], pending = KEYS[h.pending],
    tiers = KEYS[h.tiers], overrides = KEYS[h.overrides], size = h.size, count = h.count,
  }
  local names = call('ZRANGE', r.pending, 0, h.max - 1)
  if #names > 0 then
    League.place(r, names)
    Calls.variadic('ZREM', r.pending, names, 1)
    Expiry.at(h.expire_at, { r.cohorts, r.open }, true)
    call('SADD', KEYS[h.registry], r.cohorts)
  end
  left = call('ZCARD', r.pending)
end
if left == 0 then
  call('HSET', state, h.round, 1, step, 'done')
end
return left
