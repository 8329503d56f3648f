-- league.lua: placing players in a league round's cohorts (the Rust side,
-- names and settlement, is src/board/league.rs).
--
-- A round's cohorts are one zset, player -> cohort code (tier * SPAN + n,
-- tier 0 the lowest, n from 1). Per tier, the open cohort is the newest,
-- while fewer than the cohort size have been placed in it: field <tier> of
-- the round's open hash holds its number and <tier>:size how many were
-- placed in it (an erased player's place is not given again). A player
-- joins their tier's open cohort or opens the next. Their tier is the one
-- the tiers hash gives (set by the last settlement or player_tier_set), the
-- lowest for a newcomer. Used by apply (a player's first event of a round)
-- and settle (those who arrived before the previous round was settled).

local League = {}
do
  local call, tonumber, min = redis.call, tonumber, math.min
  local SPAN, CHUNK = Const.COHORT_SPAN, Calls.CHUNK

  -- Those of names (a list) not in zset key, in order.
  function League.absent(key, names)
    local out = {}
    for s = 1, #names, CHUNK do
      local e = min(s + CHUNK - 1, #names)
      local got = call('ZMSCORE', key, unpack(names, s, e))
      for x = s, e do
        if not got[x - s + 1] then out[#out + 1] = names[x] end
      end
    end
    return out
  end

  -- Places names, in order, in round r: r.cohorts, r.open (key names),
  -- r.tiers (the tiers hash), r.overrides (player_tier_set's tiers, which
  -- this placement uses up), r.size (players per cohort), r.count (tiers).
  function League.place(r, names)
    if #names == 0 then return end
    local open, size, top = {}, r.size, r.count - 1
    local zadd = {}
    for s = 1, #names, CHUNK do
      local e = min(s + CHUNK - 1, #names)
      local tiers = call('HMGET', r.tiers, unpack(names, s, e))
      for x = s, e do
        local t = min(tonumber(tiers[x - s + 1]) or 0, top)
        local o = open[t]
        if not o then
          local got = call('HMGET', r.open, t, t .. ':size')
          o = { n = tonumber(got[1]) or 0, placed = tonumber(got[2]) or size }
          open[t] = o
        end
        if o.placed >= size then
          o.n, o.placed = o.n + 1, 0
        end
        o.placed = o.placed + 1
        zadd[#zadd + 1] = t * SPAN + o.n
        zadd[#zadd + 1] = names[x]
      end
    end
    Calls.variadic('ZADD', r.cohorts, zadd, 2)
    -- A tier player_tier_set gave is used by this placement.
    if r.overrides and call('EXISTS', r.overrides) == 1 then Calls.variadic('HDEL', r.overrides, names, 1) end
    local fields, nf = {}, 0
    for t, o in pairs(open) do
      fields[nf + 1], fields[nf + 2], fields[nf + 3], fields[nf + 4] = t, o.n, t .. ':size', o.placed
      nf = nf + 4
    end
    call('HSET', r.open, unpack(fields))
  end

  -- Adds names, in order, to round r's waiting players (r.pending), after
  -- those already there.
  function League.wait(r, names)
    if #names == 0 then return end
    local first = call('HINCRBY', r.open, 'seq', #names) - #names
    local zadd = {}
    for x = 1, #names do
      zadd[#zadd + 1], zadd[#zadd + 2] = first + x, names[x]
    end
    Calls.variadic('ZADD', r.pending, zadd, 2)
  end
end
