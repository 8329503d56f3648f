-- team/teams.lua: what a team board's events do, decided and written one
-- event at a time inside team.lua's call (so a replay decides the same).
--
-- The tag keeps: the members hash (player -> "<join time ms>:<team id>"),
-- per period a key ranking teams (member: team id, score: the team's
-- score), per period and team a zset of its members' contributions
-- ("<contrib prefix><period id>:<team id>"), and per player the set of
-- "<team id> <period id>" pairs they hold a contribution in ("<index
-- prefix><player>").
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
-- Moderation (admin events on a team board, as events of this call):
-- a hidden player's contributions live in the shadow contributions keys
-- ("<shadow contrib prefix><period id>:<team id>"), off their teams' scores,
-- and go back on unhide; a hidden team's rows live in the periods' shadow
-- keys ("<shadow prefix><period id>"), out of the ranking reads; a removal
-- takes a player's contributions off in one period or all; an erasure also
-- forgets their membership.
--
-- Values read are kept for the call (vals: key -> member -> value, false
-- for none), so a member's or team's later events in the call read none.

local Teams = {}
do
  local call, format, tonumber, sub = redis.call, string.format, tonumber, string.sub
  local APPLIED, OUT_OF_RANGE = Codes.APPLIED, Codes.OUT_OF_RANGE
  -- The event kinds (src/store/write/team.rs names them too).
  local JOIN, LEAVE, HIDE, UNHIDE, REMOVE, ERASE, TEAM_HIDE, TEAM_UNHIDE = 1, 2, 3, 4, 5, 6, 7, 8

  local function fmt(n)
    return format('%d', n)
  end

  -- Whether member is in the set key, read once per call (cache: its table).
  local function is_in(cache, key, member)
    local v = cache[member]
    if v == nil then
      v = call('SISMEMBER', key, member) == 1
      cache[member] = v
    end
    return v
  end

  -- A player's contributions key for team in period pid: the shadow's while they are hidden.
  local function ckey(s, player, pid, team)
    local prefix = is_in(s.hidden, s.hidden_key, player) and s.shadow_contrib or s.contrib
    return prefix .. pid .. ':' .. team
  end

  -- The key holding team's row in period pid: the period's shadow while the team is hidden.
  local function tkey(s, pid, team)
    return (is_in(s.teams_hidden, s.teams_hidden_key, team) and s.shadow or s.period) .. pid
  end

  local function better(s, a, b)
    if s.gt then return a > b end
    return a < b
  end

  -- The value of member in zset key, read once per call (false: none).
  local function get(s, key, member)
    local c = s.vals[key]
    if not c then
      c = {}
      s.vals[key] = c
    end
    local v = c[member]
    if v == nil then
      v = tonumber(call('ZSCORE', key, member)) or false
      c[member] = v
    end
    return v
  end

  -- Writes member's value v in key (false: removes it).
  local function put(s, key, member, v)
    if v then call('ZADD', key, fmt(v), member) else call('ZREM', key, member) end
    local c = s.vals[key]
    if not c then
      c = {}
      s.vals[key] = c
    end
    c[member] = v
  end

  -- The player's team and join time, or false.
  local function membership(s, player)
    local m = s.tm[player]
    if m == nil then
      local got = call('HGET', s.members_key, player)
      m = false
      if got then
        local joined, team = string.match(got, '^(%-?%d+):(.+)$')
        m = { team = team, joined = tonumber(joined) }
      end
      s.tm[player] = m
    end
    return m
  end

  -- Takes contribution c (of a member just removed from ckey) off the
  -- team's score in pkey: a sum less c, or the best left; a team with no
  -- contribution left leaves the period.
  local function team_without(s, pkey, ckey, team, c)
    if call('ZCARD', ckey) == 0 then
      put(s, pkey, team, false)
    elseif s.is_sum then
      put(s, pkey, team, (get(s, pkey, team) or 0) - c)
    else
      local top = s.gt and call('ZRANGE', ckey, 0, 0, 'REV', 'WITHSCORES') or call('ZRANGE', ckey, 0, 0, 'WITHSCORES')
      put(s, pkey, team, tonumber(top[2]))
    end
  end

  -- Each "<team> <period id>" entry of the player's contributions list,
  -- as (entry, team, period id).
  local function entries(s, player)
    local out = {}
    for _, e in ipairs(call('SMEMBERS', s.index .. player)) do
      local team, pid = string.match(e, '^(%S+) (.+)$')
      out[#out + 1] = { e, team, pid }
    end
    return out
  end

  -- Takes the player's contributions off their teams: those to `team`
  -- (nil: any) in period `pid` (nil: every one), and their entries.
  local function drop(s, player, team, pid)
    local hidden, ikey = is_in(s.hidden, s.hidden_key, player), s.index .. player
    for _, e in ipairs(entries(s, player)) do
      if (not team or e[2] == team) and (not pid or e[3] == pid) then
        local k = ckey(s, player, e[3], e[2])
        local c = get(s, k, player)
        if c then
          put(s, k, player, false)
          if not hidden then team_without(s, tkey(s, e[3], e[2]), k, e[2], c) end
        end
        call('SREM', ikey, e[1])
      end
    end
  end

  -- Moves member's value from zset `from` to zset `to` (which takes
  -- `from`'s expiry); the value moved, or false.
  local function move(s, from, to, member)
    local v = get(s, from, member)
    if v then
      Expiry.copy(from, to)
      put(s, to, member, v)
      put(s, from, member, false)
    end
    return v
  end

  -- Hides (or shows again) a player: their contributions leave their
  -- teams' scores for the shadow contributions keys, or come back.
  local function hide_player(s, player, hide)
    if is_in(s.hidden, s.hidden_key, player) == hide then return APPLIED end
    for _, e in ipairs(entries(s, player)) do
      local team, pid = e[2], e[3]
      local live, shadow = s.contrib .. pid .. ':' .. team, s.shadow_contrib .. pid .. ':' .. team
      local tk = tkey(s, pid, team)
      if hide then
        local c = move(s, live, shadow, player)
        if c then team_without(s, tk, live, team, c) end
      else
        local c = move(s, shadow, live, player)
        local tv = c and get(s, tk, team)
        if c and s.is_sum then
          put(s, tk, team, (tv or 0) + c)
        elseif c and (not tv or better(s, c, tv)) then
          put(s, tk, team, c)
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
    if is_in(s.teams_hidden, s.teams_hidden_key, team) == hide then return APPLIED end
    for _, pkey in ipairs(call('SMEMBERS', s.registry_key)) do
      local pid = sub(pkey, #s.period + 1)
      local live, shadow = s.period .. pid, s.shadow .. pid
      if hide then move(s, live, shadow, team) else move(s, shadow, live, team) end
    end
    call(hide and 'SADD' or 'SREM', s.teams_hidden_key, team)
    s.teams_hidden[team] = hide
    return APPLIED
  end

  -- Removes a player from one period or every one; an erasure also
  -- forgets their team, their list and that they were hidden.
  local function remove(s, player, pid, erase)
    drop(s, player, nil, pid)
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
    if s.forfeit then drop(s, player, team, nil) end
    return APPLIED
  end

  local function join(s, player, team, ts)
    local m = membership(s, player)
    if m and m.team == team then return APPLIED end
    if m then leave(s, player, m.team) end
    call('HSET', s.members_key, player, fmt(ts) .. ':' .. team)
    s.tm[player] = { team = team, joined = ts }
    return APPLIED
  end

  -- The new contribution of the player to team in each period of the
  -- score (new[w], false where it does not move); nil when a sum would
  -- leave the allowed range in one of them.
  local function contributions(s, player, team, num, ev, at, np)
    local new, maxv = {}, s.maxv
    for w = 1, np do
      local j = ev[at + w]
      local c = get(s, ckey(s, player, s.pids[j], team), player)
      local nc = false
      if s.is_sum then
        nc = (c or 0) + num
        local total = (get(s, tkey(s, s.pids[j], team), team) or 0) + num
        if nc > maxv or nc < -maxv or total > maxv or total < -maxv then return nil end
      elseif not c or better(s, num, c) then
        nc = num
      end
      new[w] = nc
    end
    return new
  end

  -- A score num at time ts written to the periods ev[at + 1 .. at + np]
  -- (indexes into the header's periods): OUT_OF_RANGE, having written
  -- nothing, when a sum would leave the allowed range in one of them.
  local function score(s, player, num, ts, ev, at, np)
    local m = membership(s, player)
    if not m or ts < m.joined + s.after then return APPLIED end
    local team = m.team
    local new = contributions(s, player, team, num, ev, at, np)
    if not new then return OUT_OF_RANGE end
    for w = 1, np do
      local nc = new[w]
      if nc then
        local j = ev[at + w]
        local pid, expire = s.pids[j], s.expire[j]
        local k = ckey(s, player, pid, team)
        local c = get(s, k, player)
        put(s, k, player, nc)
        if not c then
          call('SADD', s.index .. player, team .. ' ' .. pid)
          if expire ~= 0 then call('EXPIREAT', k, fmt(expire)) end
        end
        if not is_in(s.hidden, s.hidden_key, player) then
          local tk = tkey(s, pid, team)
          local tv = get(s, tk, team)
          if s.is_sum then
            put(s, tk, team, (tv or 0) + num)
          elseif not tv or better(s, nc, tv) then
            put(s, tk, team, nc)
          end
          if expire ~= 0 and not tv then call('EXPIREAT', tk, fmt(expire)) end
          s.written[j] = true
        end
      end
    end
    return APPLIED
  end

  -- h: the call's header (see team.lua).
  function Teams.open(h)
    local s = {
      is_sum = h.op == 'sum', gt = h.op == 'gt', maxv = h.max_value, after = h.counts_after,
      forfeit = h.leave == 'forfeit', members_key = KEYS[h.members], registry_key = KEYS[h.registry],
      hidden_key = KEYS[h.hidden], teams_hidden_key = KEYS[h.teams_hidden],
      contrib = h.contrib, shadow_contrib = h.shadow_contrib, index = h.index, period = h.period, shadow = h.shadow,
      pkeys = {}, pids = {}, expire = {}, tm = {}, vals = {}, written = {}, hidden = {}, teams_hidden = {},
    }
    for j, p in ipairs(h.periods) do s.pkeys[j], s.pids[j], s.expire[j] = KEYS[p.key], p.id, p.expire_at end
    local t = {}

    -- The code of one new event (neither redelivered nor a duplicate);
    -- text: a membership's or team event's team id, a removal's period
    -- id ("" for every period).
    function t.event(kind, player, num, ts, text, ev, at, np)
      if kind == JOIN then return join(s, player, text, ts) end
      if kind == LEAVE then return leave(s, player, text) end
      if kind == HIDE or kind == UNHIDE then return hide_player(s, player, kind == HIDE) end
      if kind == REMOVE or kind == ERASE then return remove(s, player, text ~= '' and text or nil, kind == ERASE) end
      if kind == TEAM_HIDE or kind == TEAM_UNHIDE then return hide_team(s, text, kind == TEAM_HIDE) end
      return score(s, player, num, ts, ev, at, np)
    end

    -- The period keys written expire with their period and join the registry.
    function t.flush()
      local registered = {}
      for j in pairs(s.written) do registered[#registered + 1] = s.pkeys[j] end
      Calls.variadic('SADD', s.registry_key, registered, 1)
    end

    return t
  end
end
