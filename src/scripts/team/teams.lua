-- team/teams.lua: what a team board's events do, decided one at a time in
-- team.lua's call (so a replay decides the same), on the values
-- team/state.lua keeps for the call.
--
-- A score counts for the team the player is in when it is applied, if its
-- event time is at least counts_after after the join; else for no team
-- (and it is still applied: seen, so a retry is a duplicate). A member's
-- contribution is the board's mode over their counted scores for that team
-- in the period (sum: the total; gt / lt: the best); the team's score is
-- the sum (sum) or the best (gt / lt) of its contributions. A join while in
-- another team is a leave from it first; a join to the team the player is
-- in, or a leave from a team they are not in, changes nothing. With leave
-- "forfeit", a leave takes the leaver's contributions off the team in every
-- period; with "keep" they stay.
--
-- Moderation (admin events, each alone in its call): a hidden player's
-- contributions live in the hidden players' hash of each period, off their
-- teams' scores and sets, and come back on unhide; a hidden team's rows
-- live in the periods' shadow keys, out of the ranking reads; a removal
-- takes a player's contributions off in one period or all; an erasure also
-- forgets their team, their list and that they were hidden.

local Teams = {}
do
  local call = redis.call
  local APPLIED, OUT_OF_RANGE = Codes.APPLIED, Codes.OUT_OF_RANGE
  -- The event kinds (src/store/write/team.rs names them too).
  local SCORE, JOIN, LEAVE, HIDE, UNHIDE, REMOVE, ERASE, TEAM_HIDE, TEAM_UNHIDE = 0, 1, 2, 3, 4, 5, 6, 7, 8
  local get, set, add = TeamState.get, TeamState.set, TeamState.add

  local better, membership, is_hidden, cfield, tkey = TeamState.better, TeamState.membership, TeamState.is_hidden, TeamState.cfield, TeamState.tkey

  -- Team's score in period pid once contribution c (just taken off, its
  -- contributor out of the team's set) no longer counts: a sum less c, or
  -- the best left; a team with no contributor left leaves the period.
  -- (Its callers flush first: the sets' members and the other members'
  -- contributions it reads are Redis's.)
  -- tk: the key of the team's row (the period's, or its shadow's) unless
  -- given (a sealed period's snapshot).
  local function team_without(s, pid, team, c, tk)
    local set_key = s.tset .. pid .. ':' .. team
    tk = tk or tkey(s, pid, team)
    if s.is_sum then
      set(s, tk, team, call('SCARD', set_key) > 0 and (get(s, tk, team) or 0) - c)
      return
    end
    local left = call('SMEMBERS', set_key)
    if #left == 0 then
      set(s, tk, team, false)
    else
      local fields = {}
      for i, p in ipairs(left) do fields[i] = team .. ':' .. p end
      TeamState.fetch(s, s.contrib .. pid, fields, true)
      local best = false
      for _, f in ipairs(fields) do
        local v = get(s, s.contrib .. pid, f, true)
        if v and (not best or better(s, v, best)) then best = v end
      end
      set(s, tk, team, best)
    end
  end

  -- Each "<team> <period id>" entry of the player's list, as (entry, team, period id).
  local function entries(s, player)
    local out = {}
    for _, e in ipairs(call('SMEMBERS', s.index .. player)) do
      local team, pid = string.match(e, '^(%S+) (.+)$')
      out[#out + 1] = { e, team, pid }
    end
    return out
  end

  -- The entries of periods not sealed (a hide leaves a sealed period as sealed).
  local function unsealed(s, list)
    local out = {}
    for _, e in ipairs(list) do
      if not TeamState.is_sealed(s, e[3]) then out[#out + 1] = e end
    end
    return out
  end

  -- Takes the player's contributions off their teams: those to `team`
  -- (nil: any) in period `pid` (nil: every one), and their entries. A
  -- sealed period is left as sealed, unless `sealed` (a removal, an
  -- erasure): then its snapshot's team row loses the contribution too.
  local function drop(s, player, team, pid, sealed)
    TeamState.flush(s)
    local hidden = is_hidden(s, player)
    for _, e in ipairs(entries(s, player)) do
      local is_sealed = TeamState.is_sealed(s, e[3])
      if (not team or e[2] == team) and (not pid or e[3] == pid) and (sealed or not is_sealed) then
        local hk, field = cfield(s, player, e[3], e[2])
        local c = get(s, hk, field, true)
        set(s, hk, field, false, true)
        if c and not hidden then
          call('SREM', s.tset .. e[3] .. ':' .. e[2], player)
          team_without(s, e[3], e[2], c)
          if is_sealed then team_without(s, e[3], e[2], c, s.period .. e[3] .. Const.FINAL_SUFFIX) end
        end
        call('SREM', s.index .. player, e[1])
      end
    end
  end

  -- Hides (or shows again) a player: their contributions leave their
  -- teams' scores and sets for the hidden players' hashes, or come back.
  local function hide_player(s, player, hide)
    if is_hidden(s, player) == hide then return APPLIED end
    TeamState.flush(s)
    for _, e in ipairs(unsealed(s, entries(s, player))) do
      local team, pid = e[2], e[3]
      local live, shadowed, field = s.contrib .. pid, s.hcontrib .. pid, team .. ':' .. player
      local from, to = live, shadowed
      if not hide then from, to = shadowed, live end
      local c = get(s, from, field, true)
      if c then
        set(s, from, field, false, true)
        set(s, to, field, c, true)
        TeamState.copy_expiry(s, from, to)
        local members = s.tset .. pid .. ':' .. team
        if hide then
          call('SREM', members, player)
          team_without(s, pid, team, c)
        else
          add(s, members, player)
          TeamState.copy_expiry(s, live, members)
          TeamState.team_with(s, pid, team, c)
        end
      end
    end
    call(hide and 'SADD' or 'SREM', s.hidden_key, player)
    s.hidden[player] = hide
    return APPLIED
  end

  -- Hides (or shows again) a team: its rows leave every period's key for
  -- the period's shadow, or come back.
  local function hide_team(s, team, hide)
    if (s.hteams[team] or false) == hide then return APPLIED end
    TeamState.flush(s)
    for _, pkey in ipairs(call('SMEMBERS', s.registry_key)) do
      local pid = string.sub(pkey, #s.period + 1)
      local from, to = s.period .. pid, s.shadow .. pid
      if not hide then from, to = to, from end
      local v = get(s, from, team)
      if v then
        set(s, from, team, false)
        set(s, to, team, v)
        TeamState.copy_expiry(s, from, to)
      end
    end
    call(hide and 'SADD' or 'SREM', s.teams_hidden_key, team)
    s.hteams[team] = hide or nil
    return APPLIED
  end

  -- Removes a player from one period or every one; an erasure also
  -- forgets their team, their list and that they were hidden.
  local function remove(s, player, pid, erase)
    local suffix = Const.FINAL_SUFFIX
    if pid and string.sub(pid, -#suffix) == suffix then pid = string.sub(pid, 1, -#suffix - 1) end
    drop(s, player, nil, pid, true)
    if erase then
      call('HDEL', s.members_key, player)
      s.tm[player] = false
      call('DEL', s.index .. player)
      call('SREM', s.hidden_key, player)
      s.hidden[player] = false
    end
    return APPLIED
  end

  local function leave(s, player, team)
    local m = membership(s, player)
    if not m or m.team ~= team then return APPLIED end
    call('HDEL', s.members_key, player)
    s.tm[player] = false
    if s.forfeit then drop(s, player, team, nil, false) end
    return APPLIED
  end

  local function join(s, player, team, ts)
    local m = membership(s, player)
    if m and m.team == team then return APPLIED end
    if m then leave(s, player, m.team) end
    call('HSET', s.members_key, player, string.format('%d', ts) .. ':' .. team)
    s.tm[player] = { team = team, joined = ts }
    return APPLIED
  end

  -- The code of one new event (neither redelivered nor a duplicate);
  -- text: a membership's or team event's team id, a removal's period id
  -- ("" for every period).
  function Teams.event(s, kind, player, num, ts, text, ev, at, np)
    if kind == SCORE then return TeamScores.score(s, player, num, ts, ev, at, np) end
    if kind == JOIN then return join(s, player, text, ts) end
    if kind == LEAVE then return leave(s, player, text) end
    if kind == HIDE or kind == UNHIDE then return hide_player(s, player, kind == HIDE) end
    if kind == REMOVE or kind == ERASE then return remove(s, player, text ~= '' and text or nil, kind == ERASE) end
    if kind == TEAM_HIDE or kind == TEAM_UNHIDE then return hide_team(s, text, kind == TEAM_HIDE) end
    return OUT_OF_RANGE
  end
end
