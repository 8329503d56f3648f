-- team/scores.lua: the scores of a team call, on team/state.lua's values:
-- what the batch's scores will read, fetched in one command per key, and
-- each score's contributions and team scores.

local TeamScores = {}
do
  local get, set, add = TeamState.get, TeamState.set, TeamState.add
  local APPLIED, OUT_OF_RANGE, PERIOD_CLOSED = Codes.APPLIED, Codes.OUT_OF_RANGE, Codes.PERIOD_CLOSED

  -- Fetches what the batch's scores read, as their players stand at the
  -- call's start (a join in the call reads its own later, one by one):
  -- their teams and hiding, then per period the contributions and team
  -- rows they touch. ev: the batch's events (team.lua's layout), ne many.
  function TeamScores.prefetch(s, ev, ne)
    local players, seen, a = {}, {}, 0
    for _ = 1, ne do
      local player, np = ev[a + 3], ev[a + 9]
      if not seen[player] then
        seen[player] = true
        players[#players + 1] = player
      end
      a = a + 9 + np
    end
    TeamState.prefetch(s, players)
    -- Every score's field and team, once: the same fields are read in
    -- every period's hash (a period an event does not write reads a few
    -- fields more, which costs less than working out each one's).
    local fields, hfields, teams, hteams, listed = {}, {}, {}, {}, {}
    a = 0
    for _ = 1, ne do
      local player, np = ev[a + 3], ev[a + 9]
      local m = s.tm[player]
      if m and ev[a + 4] == 0 then
        local team = m.team
        local field = team .. ':' .. player
        if not listed[field] then
          listed[field] = true
          local list = s.hidden[player] and hfields or fields
          list[#list + 1] = field
        end
        if not listed[team] then
          listed[team] = true
          local list = s.hteams[team] and hteams or teams
          list[#list + 1] = team
        end
      end
      a = a + 9 + np
    end
    for j = 1, #s.pids do
      TeamState.fetch(s, s.ckeys[j], fields, true)
      if #hfields > 0 then TeamState.fetch(s, s.hkeys[j], hfields, true) end
      TeamState.fetch(s, s.pkeys[j], teams, false)
      if #hteams > 0 then TeamState.fetch(s, s.shadow .. s.pids[j], hteams, false) end
    end
  end

  -- Whether period j takes a record of time rts: not sealed, nor closed
  -- on demand at or before rts.
  local function open(s, j, rts)
    local close = s.closes[j]
    return not s.sealed[j] and not (close and rts >= close)
  end

  -- A score num at time ts (record time rts) written to the periods
  -- ev[at + 1 .. at + np] (indexes into the header's periods) that take
  -- it: OUT_OF_RANGE, having written nothing, when a sum would leave the
  -- allowed range in one of them; PERIOD_CLOSED when none takes it.
  -- (The hot path: values are looked up inline, each once.)
  function TeamScores.score(s, player, num, ts, rts, ev, at, np)
    if s.seal_on then
      local any = false
      for w = 1, np do any = any or open(s, ev[at + w], rts) end
      if not any then return PERIOD_CLOSED end
    end
    local m = s.tm[player]
    if m == nil then m = TeamState.membership(s, player) end
    if not m or ts < m.joined + s.after then return APPLIED end
    local team = m.team
    local hidden = s.hidden[player]
    if hidden == nil then hidden = TeamState.is_hidden(s, player) end
    local field, is_sum, gt, maxv = team .. ':' .. player, s.is_sum, s.gt, s.maxv
    local ckeys, vals, dirty, hteam = hidden and s.hkeys or s.ckeys, s.vals, s.dirty, s.hteams[team]
    local cs, ts_, tks, seal_on = s.scratch_c, s.scratch_t, s.scratch_k, s.seal_on
    for w = 1, np do
      local j = ev[at + w]
      if seal_on and not open(s, j, rts) then
        cs[w] = 'closed'
      else
        local c = vals[ckeys[j]][field]
        if c == nil then c = get(s, ckeys[j], field, true) end
        cs[w] = c
        if not hidden then
          local tk = hteam and s.shadow .. s.pids[j] or s.pkeys[j]
          local kept = vals[tk]
          local tv = kept and kept[team]
          if tv == nil then tv = get(s, tk, team) end
          ts_[w], tks[w] = tv, tk
          if is_sum and ((tv or 0) + num > maxv or (tv or 0) + num < -maxv) then return OUT_OF_RANGE end
        end
        if is_sum and ((c or 0) + num > maxv or (c or 0) + num < -maxv) then return OUT_OF_RANGE end
      end
    end
    for w = 1, np do
      local c = cs[w]
      local nc
      if c == 'closed' then
        nc = nil
      elseif is_sum then
        nc = (c or 0) + num
      elseif not c or (gt and num > c) or (not gt and num < c) then
        nc = num
      end
      if nc then
        local j = ev[at + w]
        local ck = ckeys[j]
        vals[ck][field] = nc
        dirty[ck][field] = true
        if not c then
          local pid = s.pids[j]
          add(s, s.index .. player, team .. ' ' .. pid)
          if not hidden then add(s, s.tset .. pid .. ':' .. team, player, s.expire[j]) end
        end
        if not hidden then
          local tk, tv = tks[w], ts_[w]
          local nt = false
          if is_sum then
            nt = (tv or 0) + num
          elseif not tv or (gt and nc > tv) or (not gt and nc < tv) then
            nt = nc
          end
          if nt then set(s, tk, team, nt) end
          if not s.written[j] then
            s.written[j] = true
            if s.expire[j] ~= 0 then s.expire_of[ck], s.expire_of[tk] = s.expire[j], s.expire[j] end
          end
        elseif s.expire[j] ~= 0 then
          s.expire_of[ck] = s.expire[j]
        end
      end
    end
    return APPLIED
  end
end
