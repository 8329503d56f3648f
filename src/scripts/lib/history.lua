-- history.lua: players' history, as a seal records it on one board tag.
--
-- A sealed period's history hash maps each player to their standing,
-- "<ordinal>:<competition>:<total>:<stored>": the ranks a player read of the
-- sealed period answers (ordinal: the position in board order;
-- competition: one more than the players with a better value), the members
-- of the sealed board and the stored score. A kind's best hash maps each
-- player to "<ordinal>:<period id>", raised when a period ranks them better
-- (an equal rank keeps the earlier period, whichever was sealed first).
-- Writing a standing again writes the same values, so a step taken over
-- after a crash is harmless.
--
-- The history hash expires with the period's snapshot; the best hashes
-- never do. Both are listed in the tag's history registry, which reads and
-- erasures walk.

local History = {}
do
  local call, format, tonumber, unpack, min = redis.call, string.format, tonumber, unpack, math.min
  -- Lua unpacks at most a few thousand values at once: commands over long
  -- lists go in slices.
  local SLICE = 1000

  local function hset(key, list)
    for i = 1, #list, 2 * SLICE do call('HSET', key, unpack(list, i, min(i + 2 * SLICE - 1, #list))) end
  end

  local function hmget(key, fields)
    local out = {}
    for i = 1, #fields, SLICE do
      local got = call('HMGET', key, unpack(fields, i, min(i + SLICE - 1, #fields)))
      for k = 1, #got do out[i + k - 1] = got[k] end
    end
    return out
  end

  -- Drops from the registry the history hashes that have expired (a
  -- period's first step does it).
  function History.prune(registry)
    for _, k in ipairs(call('SMEMBERS', registry)) do
      if call('EXISTS', k) == 0 then call('SREM', registry, k) end
    end
  end

  -- Records members[i]'s standing standings[i], whose ordinal is
  -- ordinals[i], in the history hash hist (EXPIREAT expire_at), and raises
  -- their best of the kind in the best hash best to it.
  function History.record(hist, best, registry, expire_at, period, members, standings, ordinals)
    local n = #members
    if n == 0 then return end
    local records = {}
    for i = 1, n do
      records[2 * i - 1], records[2 * i] = members[i], standings[i]
    end
    hset(hist, records)
    local was = hmget(best, members)
    local raised = {}
    for i = 1, n do
      local old, old_period
      if was[i] then old, old_period = string.match(was[i], '^(%d+):(.*)$') end
      old = tonumber(old)
      -- An equal rank keeps the earlier period, whichever was sealed first
      -- (a period id of a kind sorts by its start: d:2026-12-05 < d:2026-12-06).
      if not old or ordinals[i] < old or (ordinals[i] == old and period < old_period) then
        raised[#raised + 1] = members[i]
        raised[#raised + 1] = format('%d:%s', ordinals[i], period)
      end
    end
    hset(best, raised)
    Expiry.at(expire_at, { hist })
    call('SADD', registry, hist, best)
  end
end
