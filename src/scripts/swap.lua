-- rankflow rebuild: swaps one board tag's rebuilt keys in for its live
-- keys, atomically, if the rebuild has applied every record the live
-- workers have applied on the tag. Both sets of keys carry the same hash
-- tag (the rebuild's key prefix differs only before it), so they are on
-- one node and this script sees them all.
--
-- keys: live_offsets built_offsets live_registry built_registry live_sealed built_sealed live_hidden built_hidden live_held built_held live_queue built_queue live_members? built_members? live_teams_hidden? built_teams_hidden?
-- derives: live_pp built_pp live_seen built_seen live_pqueue built_pqueue team aux
--   (the period keys under the live and rebuilt prefixes, their dedupe
--   hashes, the players' queues of held events, and the per-period keys
--   of each aux pair of prefixes)
-- KEYS[1]  live offsets hash          KEYS[2]  rebuilt offsets hash
-- KEYS[3]  live registry of period keys   KEYS[4]  rebuilt registry
-- KEYS[5]  live sealed hash           KEYS[6]  rebuilt sealed hash
-- KEYS[7]  live hidden set            KEYS[8]  rebuilt hidden set
-- KEYS[9]  live held events           KEYS[10] rebuilt held events
-- KEYS[11] live queue of held events  KEYS[12] rebuilt queue
-- KEYS[13..16] team boards only: the live and rebuilt members hashes, the
--          live and rebuilt hidden teams
-- ARGV[1]  the live period key prefix ("lb:{points}:")
-- ARGV[2]  the rebuilt period key prefix ("_rebuild:lb:{points}:")
-- ARGV[3]  dedupe_ttl, seconds
-- ARGV[4], ARGV[5]  the live and rebuilt dedupe hash prefixes ("..:_seen:")
-- ARGV[6], ARGV[7]  the live and rebuilt prefixes of the players' queues
--          of held events ("..:_heldp:")
-- ARGV[8]  team boards: 5, and 5 pairs of a live and a rebuilt prefix
--          follow (the periods' contributions hashes and hidden players'
--          ones, the teams' sets of contributors, players' lists of
--          contributions, the periods' shadows); else 0
-- ARGV[..] pairs: a live and a rebuilt per-period key prefix (the rows
--          of boards with columns, the dense index, its counts, event
--          times, metadata, attempts, hidden
--          players' values, a league round's cohorts, open cohorts and
--          waiting players), each completed with a period id
--
-- Where the two agree: every partition field of the live offsets hash is
-- in the rebuilt one at an offset at least as high. (Rebuilt ahead is
-- fine: the live workers then find those records applied, and go on.)
-- Otherwise nothing changes and the reply is {0, field, live, rebuilt}.
--
-- The swap: every live period key that is not sealed goes, with its
-- per-period keys; every rebuilt period key takes its live name (unless
-- that period is sealed live: a sealed period is final, and stays as the
-- live workers sealed it), and so do the hidden set and the dedupe hashes
-- of the current windows; the offsets (with the tag's registration) are
-- copied; the held events (integrity rules), pending and decided, and
-- their queues are the rebuilt ones. Sealed snapshots, rolling boards,
-- the sealed hash, rate-limit and gain windows and the held events' times
-- of hold_hides_after are the live tag's and stay.
-- Reply: {1, period keys swapped in}.

local call = redis.call
local live_off, built_off, live_reg, built_reg = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local live_sealed, built_sealed, live_hidden, built_hidden = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local live_pp, built_pp = ARGV[1], ARGV[2]
local ttl = tonumber(ARGV[3])
local live_seen, built_seen = ARGV[4], ARGV[5]
local aux = {}
-- The period ids of sealed snapshots, rolling boards and rolling builds
-- (the prelude's, from src/period/id.rs and src/keys.rs).
local final_suffix, rolling = Const.FINAL_SUFFIX, Const.ROLLING_PREFIX
local building = Const.ROLL_BUILD_PREFIX .. Const.ROLLING_PREFIX
local live_pqueue, built_pqueue = ARGV[6], ARGV[7]
local team = {}
local nteam = tonumber(ARGV[8])
for i = 1, nteam do team[i] = { ARGV[7 + 2 * i], ARGV[8 + 2 * i] } end
for i = 9 + 2 * nteam, #ARGV, 2 do aux[#aux + 1] = { ARGV[i], ARGV[i + 1] } end

-- Only the partition fields ("<topic>:<partition>") compare: the field
-- "registered" (keys::REGISTERED_FIELD) is not an offset.
local live = call('HGETALL', live_off)
for i = 1, #live, 2 do
  if string.find(live[i], ':', 1, true) then
    local built = call('HGET', built_off, live[i])
    if not built or tonumber(built) < tonumber(live[i + 1]) then
      return { 0, live[i], live[i + 1], built or '-1' }
    end
  end
end

-- `from` takes the name `to`; no `from`: `to` goes.
local function move(from, to)
  call('UNLINK', to)
  if call('EXISTS', from) == 1 then call('RENAME', from, to) end
end

local function is_sealed(key)
  return call('HEXISTS', live_sealed, key) == 1
end

-- The scheduler's keys: sealed snapshots, rolling boards and their builds.
local function is_scheduled(id)
  return string.sub(id, -#final_suffix) == final_suffix or string.sub(id, 1, #rolling) == rolling
    or string.sub(id, 1, #building) == building
end

-- A team board's keys beside its period keys (side 1: live, 2: rebuilt),
-- each once: per period its contributions hashes (the players' and the
-- hidden players') and the sets of contributors of the teams ranked (or
-- hidden) in it, and every player's list of contributions.
local function team_keys(side, pp, reg)
  local contrib, shadowed, sets, lists, shadow = team[1][side], team[2][side], team[3][side], team[4][side], team[5][side]
  local players, out = {}, {}
  for _, k in ipairs(call('SMEMBERS', reg)) do
    local id = string.sub(k, #pp + 1)
    -- A period sealed live stays as the live workers sealed it, its
    -- contributions and sets with it (and the scheduler's keys are not periods).
    if not is_sealed(live_pp .. id) and not is_scheduled(id) then
      out[#out + 1] = contrib .. id
      out[#out + 1] = shadowed .. id
      for _, rows in ipairs({ k, shadow .. id }) do
        for _, t in ipairs(call('ZRANGE', rows, 0, -1)) do out[#out + 1] = sets .. id .. ':' .. t end
      end
      for _, hash in ipairs({ contrib .. id, shadowed .. id }) do
        for _, f in ipairs(call('HKEYS', hash)) do players[string.match(f, '^[^:]*:(.*)$')] = true end
      end
    end
  end
  for p in pairs(players) do out[#out + 1] = lists .. p end
  return out
end
local live_team, built_team
if nteam > 0 then
  live_team, built_team = team_keys(1, live_pp, live_reg), team_keys(2, built_pp, built_reg)
end

for _, k in ipairs(call('SMEMBERS', live_reg)) do
  local id = string.sub(k, #live_pp + 1)
  if not is_sealed(k) and not is_scheduled(id) then
    call('UNLINK', k)
    for _, a in ipairs(aux) do call('UNLINK', a[1] .. id) end
    call('SREM', live_reg, k)
  end
end

local swapped = 0
for _, k in ipairs(call('SMEMBERS', built_reg)) do
  local id = string.sub(k, #built_pp + 1)
  local target = live_pp .. id
  if is_sealed(target) or is_scheduled(id) then
    call('UNLINK', k)
    for _, a in ipairs(aux) do call('UNLINK', a[2] .. id) end
  else
    move(k, target)
    for _, a in ipairs(aux) do move(a[2] .. id, a[1] .. id) end
    call('SADD', live_reg, target)
    swapped = swapped + 1
  end
end

if nteam > 0 then
  for _, k in ipairs(live_team) do call('UNLINK', k) end
  for _, k in ipairs(built_team) do move(k, live_pp .. string.sub(k, #built_pp + 1)) end
  move(KEYS[14], KEYS[13])
  move(KEYS[16], KEYS[15])
end

-- The offsets are copied, not moved: the rebuild reads on after a swap
-- (other tags may still wait), and its later calls on this tag must find
-- its own registration and offsets (see apply.lua, "Lost data"); what it
-- writes there from now on is removed when it ends.
call('UNLINK', live_off)
call('COPY', built_off, live_off)
move(built_hidden, live_hidden)
-- Held events: the players' queues go with their held events' records.
local function players(held)
  local out = {}
  for _, blob in ipairs(call('HVALS', held)) do out[cmsgpack.unpack(blob)[2]] = true end
  return out
end
for p in pairs(players(KEYS[9])) do call('UNLINK', live_pqueue .. p) end
for p in pairs(players(KEYS[10])) do move(built_pqueue .. p, live_pqueue .. p) end
move(KEYS[10], KEYS[9])
move(KEYS[12], KEYS[11])
-- The dedupe hashes that may still be consulted: every rebuilt one takes
-- the live one's place (it holds every event the live one saw in that
-- window, or the rebuilt one of a later window does); a live one without
-- a rebuilt counterpart stays.
local now = tonumber(call('TIME')[1])
local n = math.floor(now / ttl)
for w = n - 3, n + 1 do
  local id = string.format('%d', w)
  if call('EXISTS', built_seen .. id) == 1 then move(built_seen .. id, live_seen .. id) end
end
call('UNLINK', built_reg, built_sealed)
return { 1, swapped }
