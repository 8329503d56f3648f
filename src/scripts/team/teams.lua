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
-- Values read are kept for the call (vals: key -> member -> value, false
-- for none), so a member's or team's later events in the call read none.

local Teams = {}
do
  local call, format, tonumber, sub = redis.call, string.format, tonumber, string.sub
  local APPLIED, OUT_OF_RANGE = Codes.APPLIED, Codes.OUT_OF_RANGE
  local SCORE, JOIN, LEAVE = 0, 1, 2
  Teams.SCORE, Teams.JOIN, Teams.LEAVE = SCORE, JOIN, LEAVE

  local function fmt(n)
    return format('%d', n)
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

  -- Takes the player's contributions to team off it in every period.
  local function forfeit_all(s, player, team)
    local ikey, head = s.index .. player, team .. ' '
    for _, e in ipairs(call('SMEMBERS', ikey)) do
      if sub(e, 1, #head) == head then
        local pid = sub(e, #head + 1)
        local ckey = s.contrib .. pid .. ':' .. team
        local c = get(s, ckey, player)
        if c then
          put(s, ckey, player, false)
          team_without(s, s.period .. pid, ckey, team, c)
        end
        call('SREM', ikey, e)
      end
    end
  end

  local function leave(s, player, team)
    local m = membership(s, player)
    if not m or m.team ~= team then return APPLIED end
    call('HDEL', s.members_key, player)
    s.tm[player] = false
    if s.forfeit then forfeit_all(s, player, team) end
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
      local c = get(s, s.contrib .. s.pids[j] .. ':' .. team, player)
      local nc = false
      if s.is_sum then
        nc = (c or 0) + num
        local total = (get(s, s.pkeys[j], team) or 0) + num
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
        local ckey, pkey, expire = s.contrib .. s.pids[j] .. ':' .. team, s.pkeys[j], s.expire[j]
        local c = get(s, ckey, player)
        put(s, ckey, player, nc)
        if not c then
          call('SADD', s.index .. player, team .. ' ' .. s.pids[j])
          if expire ~= 0 then call('EXPIREAT', ckey, fmt(expire)) end
        end
        local tv = get(s, pkey, team)
        if s.is_sum then
          put(s, pkey, team, (tv or 0) + num)
        elseif not tv or better(s, nc, tv) then
          put(s, pkey, team, nc)
        end
        s.written[j] = true
      end
    end
    return APPLIED
  end

  -- h: the call's header (see team.lua).
  function Teams.open(h)
    local s = {
      is_sum = h.op == 'sum', gt = h.op == 'gt', maxv = h.max_value, after = h.counts_after,
      forfeit = h.leave == 'forfeit', members_key = KEYS[h.members],
      contrib = h.contrib, index = h.index, period = h.period,
      pkeys = {}, pids = {}, expire = {}, tm = {}, vals = {}, written = {},
    }
    for j, p in ipairs(h.periods) do s.pkeys[j], s.pids[j], s.expire[j] = KEYS[p.key], p.id, p.expire_at end
    local t = {}

    -- The code of one new event (neither redelivered nor a duplicate).
    function t.event(kind, player, num, ts, team, ev, at, np)
      if kind == JOIN then return join(s, player, team, ts) end
      if kind == LEAVE then return leave(s, player, team) end
      return score(s, player, num, ts, ev, at, np)
    end

    -- The period keys written expire with their period and join the registry.
    function t.flush()
      local registered = {}
      for j in pairs(s.written) do
        if s.expire[j] ~= 0 then call('EXPIREAT', s.pkeys[j], fmt(s.expire[j])) end
        registered[#registered + 1] = s.pkeys[j]
      end
      Calls.variadic('SADD', KEYS[h.registry], registered, 1)
    end

    return t
  end
end
