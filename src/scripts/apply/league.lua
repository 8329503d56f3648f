-- apply/league.lua: phase 4 of an apply call on a league board: the
-- players whose first applied event of a round is in this call join the
-- round (league.lua), in the same atomic step as the event's marker and
-- writes, so a retry, a redelivery or a second worker never places a
-- player twice. A player joins at once when the previous round is settled,
-- or held nobody (the league's first round), or there is none (a window's
-- single round); otherwise they wait, in arrival order, for that
-- settlement, which places them (settle.lua).
--
-- Header: league = { tiers, overrides, state, registry (KEYS indexes of
-- the tiers hash, player_tier_set's tiers, the settlements hash, the
-- registry of round keys), size (players
-- per cohort), count (tiers) }; per period that is a round, round =
-- { cohorts, open, pending (KEYS indexes), prev (the previous round's id),
-- prev_cohorts, prev_pending (its KEYS indexes) }.

local ApplyLeague = {}
do
  local call = redis.call

  -- Whether round p places at once.
  local function placeable(lg, p)
    if not p.prev then return true end
    if call('HEXISTS', KEYS[lg.state], p.prev) == 1 then return true end
    return call('EXISTS', KEYS[p.prev_cohorts], KEYS[p.prev_pending]) == 0
  end

  -- Phase 4: A.rounds[j].list holds, in order, the members with an event
  -- applied to round j in this call (decide.lua).
  function ApplyLeague.run(A)
    local lg = A.h.league
    for j, joined in pairs(A.rounds) do
      if #joined.list > 0 then
        local p = A.h.periods[j].round
        local names = {}
        for x, m in ipairs(joined.list) do names[x] = A.members[m] end
        local r = {
          cohorts = KEYS[p.cohorts], open = KEYS[p.open], pending = KEYS[p.pending],
          tiers = KEYS[lg.tiers], overrides = KEYS[lg.overrides], size = lg.size, count = lg.count,
        }
        local fresh = League.absent(r.cohorts, names)
        if #fresh > 0 and call('EXISTS', r.pending) == 1 then fresh = League.absent(r.pending, fresh) end
        if #fresh > 0 then
          if placeable(lg, p) then League.place(r, fresh) else League.wait(r, fresh) end
          Expiry.at(A.h.periods[j].expire_at, { r.cohorts, r.open, r.pending }, true)
          call('SADD', KEYS[lg.registry], r.cohorts, r.pending)
        end
      end
    end
  end
end
