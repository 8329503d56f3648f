-- team/state.lua: a team call's view of its tag, read in a few commands
-- and written at the end, so that its cost does not grow by a command per
-- event and period (team/teams.lua decides the events on it).
--
-- Per period (id pid) the tag keeps: the period key, ranking teams (a
-- hidden team's row in the period's shadow instead); a hash of
-- contributions, field "<team id>:<player>" -> the player's contribution
-- to the team (a hidden player's in a hash of its own); per team a set of
-- its counted contributors (its members' count and list). Per player: the
-- members hash's "<join time ms>:<team id>", and the set of "<team id>
-- <period id>" pairs they hold a contribution in.
--
-- Every value read is kept for the call (false: none); a value set is
-- written by flush(), which a call runs at its end and before any step
-- that reads Redis beyond the values kept (a forfeit, a hide).

local TeamState = {}
do
  local call, format, tonumber = redis.call, string.format, tonumber
  local CHUNK = Calls.CHUNK

  local function fmt(n)
    return format('%d', n)
  end

  -- A table's subtable k, made on first use.
  local function sub(t, k)
    local v = t[k]
    if not v then
      v = {}
      t[k] = v
    end
    return v
  end

  -- h: the call's header (see team.lua).
  function TeamState.open(h)
    local s = {
      is_sum = h.op == 'sum', gt = h.op == 'gt', maxv = h.max_value, after = h.counts_after,
      forfeit = h.leave == 'forfeit', members_key = KEYS[h.members], registry_key = KEYS[h.registry],
      hidden_key = KEYS[h.hidden], teams_hidden_key = KEYS[h.teams_hidden],
      period = h.period, shadow = h.shadow, contrib = h.contrib, hcontrib = h.shadow_contrib,
      tset = h.team_set, index = h.index,
      pkeys = {}, pids = {}, expire = {},
      -- Kept: tm[player] ({team, joined} or false), hidden[player], hteams[team];
      -- vals[key][member] (a hash's field or a zset's member: its number or false).
      tm = {}, hidden = {}, hteams = {}, vals = {}, hashes = {},
      -- To write: dirty[key][member] = true; adds[set] = {members}; expire_of[key] = at.
      dirty = {}, adds = {}, expire_of = {}, copies = {}, written = {},
      -- A score's values per period, reused by every score.
      scratch_c = {}, scratch_t = {}, scratch_k = {}, sealed_ids = {},
    }
    -- Per period j: its key, id, expiry and contributions hashes (ckeys,
    -- hkeys: the hidden players'), each with its kept values and writes.
    s.ckeys, s.hkeys = {}, {}
    for j, p in ipairs(h.periods) do
      s.pkeys[j], s.pids[j], s.expire[j] = KEYS[p.key], p.id, p.expire_at
      s.ckeys[j], s.hkeys[j] = s.contrib .. p.id, s.hcontrib .. p.id
      for _, k in ipairs({ s.pkeys[j], s.ckeys[j], s.hkeys[j] }) do s.vals[k], s.dirty[k] = {}, {} end
      s.hashes[s.ckeys[j]], s.hashes[s.hkeys[j]] = true, true
    end
    for _, t in ipairs(call('SMEMBERS', s.teams_hidden_key)) do s.hteams[t] = true end
    -- Boards that seal: which periods are sealed, and when those closed on demand close.
    s.seal_on, s.sealed, s.closes, s.sealed_key = h.sealed ~= nil, {}, {}, h.sealed and KEYS[h.sealed]
    if s.seal_on then
      for j, pk in ipairs(s.pkeys) do
        local v = call('HMGET', s.sealed_key, pk, pk .. ':closes')
        s.sealed[j], s.closes[j] = v[1] ~= false, tonumber(v[2])
      end
    end
    return s
  end

  -- Reads what a batch's events will read, in one command per key: the
  -- players' teams and hiding (players: a list), then each key's members
  -- (wanted[key] = list of members; hashes[key] says a hash).
  function TeamState.prefetch(s, players)
    local n = #players
    for c = 1, n, CHUNK do
      local e = math.min(c + CHUNK - 1, n)
      local got = call('HMGET', s.members_key, unpack(players, c, e))
      local hid = call('SMISMEMBER', s.hidden_key, unpack(players, c, e))
      for i = c, e do
        local v, p = got[i - c + 1], players[i]
        if v then
          local joined, team = string.match(v, '^(%-?%d+):(.+)$')
          s.tm[p] = { team = team, joined = tonumber(joined) }
        else
          s.tm[p] = false
        end
        s.hidden[p] = hid[i - c + 1] == 1
      end
    end
  end

  -- Reads members of key (a hash when hash) not kept yet, in chunks.
  function TeamState.fetch(s, key, members, hash)
    local kept, list = sub(s.vals, key), {}
    for _, m in ipairs(members) do
      if kept[m] == nil then list[#list + 1] = m end
    end
    s.hashes[key] = hash
    for c = 1, #list, CHUNK do
      local e = math.min(c + CHUNK - 1, #list)
      local got = call(hash and 'HMGET' or 'ZMSCORE', key, unpack(list, c, e))
      for i = c, e do kept[list[i]] = tonumber(got[i - c + 1]) or false end
    end
  end

  -- The value of member in key (a hash when hash), false for none.
  function TeamState.get(s, key, member, hash)
    local kept = sub(s.vals, key)
    local v = kept[member]
    if v == nil then
      s.hashes[key] = hash
      v = tonumber(call(hash and 'HGET' or 'ZSCORE', key, member)) or false
      kept[member] = v
    end
    return v
  end

  -- Sets member's value in key (false: removes it), written by flush.
  function TeamState.set(s, key, member, v, hash)
    sub(s.vals, key)[member] = v
    sub(s.dirty, key)[member] = true
    s.hashes[key] = hash
  end

  -- Adds member to set key at flush; at: the set's expiry (0: none).
  function TeamState.add(s, key, member, at)
    local list = sub(s.adds, key)
    list[#list + 1] = member
    if at and at ~= 0 then s.expire_of[key] = at end
  end

  -- Key takes key from's expiry at flush (a value moved between them).
  function TeamState.copy_expiry(s, from, to)
    s.copies[#s.copies + 1] = { from, to }
  end

  -- Writes every value set and every member added since the last flush.
  function TeamState.flush(s)
    for key, members in pairs(s.dirty) do
      local kept, hash, put, del = s.vals[key], s.hashes[key], {}, {}
      for m in pairs(members) do
        local v = kept[m]
        if v then
          if hash then
            put[#put + 1] = m
            put[#put + 1] = fmt(v)
          else
            put[#put + 1] = fmt(v)
            put[#put + 1] = m
          end
        else
          del[#del + 1] = m
        end
      end
      Calls.variadic(hash and 'HSET' or 'ZADD', key, put, 2)
      Calls.variadic(hash and 'HDEL' or 'ZREM', key, del, 1)
    end
    for key, members in pairs(s.adds) do Calls.variadic('SADD', key, members, 1) end
    for key, at in pairs(s.expire_of) do call('EXPIREAT', key, fmt(at)) end
    for _, c in ipairs(s.copies) do Expiry.copy(c[1], c[2]) end
    for key in pairs(s.dirty) do s.dirty[key] = {} end
    s.adds, s.expire_of, s.copies = {}, {}, {}
  end

  function TeamState.better(s, a, b)
    if s.gt then return a > b end
    return a < b
  end

  -- The player's team and join time, or false.
  function TeamState.membership(s, player)
    local m = s.tm[player]
    if m == nil then
      TeamState.prefetch(s, { player })
      m = s.tm[player]
    end
    return m
  end

  function TeamState.is_hidden(s, player)
    if s.hidden[player] == nil then s.hidden[player] = call('SISMEMBER', s.hidden_key, player) == 1 end
    return s.hidden[player]
  end

  -- Where a player's contribution to team in period pid is: the hash and its field.
  function TeamState.cfield(s, player, pid, team)
    return (TeamState.is_hidden(s, player) and s.hcontrib or s.contrib) .. pid, team .. ':' .. player
  end

  -- Whether period pid is sealed (read once per call).
  function TeamState.is_sealed(s, pid)
    if not s.seal_on then return false end
    local v = s.sealed_ids[pid]
    if v == nil then
      v = call('HEXISTS', s.sealed_key, s.period .. pid) == 1
      s.sealed_ids[pid] = v
    end
    return v
  end

  -- The key holding team's row in period pid: the period's shadow while the team is hidden.
  function TeamState.tkey(s, pid, team)
    return (s.hteams[team] and s.shadow or s.period) .. pid
  end

  -- Team's score in period pid once contribution c counts again.
  function TeamState.team_with(s, pid, team, c)
    local tk = TeamState.tkey(s, pid, team)
    local tv = TeamState.get(s, tk, team)
    if s.is_sum then
      TeamState.set(s, tk, team, (tv or 0) + c)
    elseif not tv or TeamState.better(s, c, tv) then
      TeamState.set(s, tk, team, c)
    end
  end
end
