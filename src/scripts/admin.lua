-- admin.lua: one admin event (a correction or moderation) on ONE board tag,
-- atomically, at most once per record and once per event id: the same
-- offset check (offsets.lua) and the same dedupe markers (markers.lua) as
-- apply.lua, so neither a replayed admin event nor a producer's retry of it
-- (same event id, later offset) takes effect twice.
--
-- Hidden players: a tag's hidden set holds the players taken out of every
-- read of others. Their values live in shadow keys ("_hid:<period>", one
-- per period key, same expiry) instead of the period keys, so the period
-- keys, their dense indexes, totals and ranks hold only the visible
-- players; apply.lua writes a hidden player's later events to the shadows.
--
-- keys by name: offsets registry hidden versions sealed league_tiers league_overrides league_registry history_registry rate_key held held_queue held_player gain_key held_times
-- derives: period dense counts times meta shadow attempts rows versions seen refused
--   (per period id: the period key and its per-period keys, each from its
--   header prefix, and its version hash from KEYS[h.versions]; marker
--   buckets and refusals as apply.lua's)
-- ARGV[1]  the header, a MessagePack map (built by src/store/moderation/admin.rs):
--   offsets, registry, hidden, versions   KEYS indexes: the tag's offsets
--            hash, its registry of period keys, its hidden set, and what the
--            version hashes of its sealed snapshots and rolling boards start
--            with (completed with a period id; their `admin` counter rises
--            with a removal, hiding, unhiding or erasure, which may change them)
--   sealed   boards that seal only: KEYS index of the tag's sealed hash
--   field, offset, member    the record's "<topic>:<partition>" and offset, the player
--   seen, ttl, refused       as in apply.lua
--   prefixes: period ("<prefix>:{tag}:", the rest is a period id), dense,
--            counts, times, meta, shadow, attempts ("..._dense:" and so on)
--   rate_key KEYS index of the member's rate-limit window (an erasure deletes it)
--   held, held_queue, held_player, gain_key, held_times   KEYS indexes
--            of the tag's held events and their queue, the member's own
--            queue, the tag's gain windows and the member's held events'
--            times (integrity rules; an erasure removes the member's)
--   rows, row_prefix, row_len   boards ranked by several columns: the
--            rows hashes' prefix, how many bytes of a row start its member
--            (see apply/columns.lua): a member's entry is then those bytes
--            and the player id, found through its row; and how many are its
--            row key, what a dense index of such a board holds
--   mode     the board's write op: "sum" | "gt" | "lt" | "latest" | "cols"
--   shift, desc, top_k, dense     as in apply.lua
--   op       "set" | "set_row" | "adjust" | "remove" | "hide" | "unhide" | "erase" | "tier"
--   set:     stored (the stored score), ts (event time, ms), periods
--   set_row: row (boards ranked by several columns: the row as the rows
--            hash keeps it), ts, periods
--   adjust:  delta, ts, tie (tie component), max_value, periods
--            periods: a list of {id, expire_at (EXPIREAT seconds, 0: none)}
--   remove:  period (a period id, or "" for every period key of the tag)
--   tier:    tier (a league tier's index): the player's next placement
--   league_tiers, league_overrides, league_registry   KEYS indexes of the
--            tag's league keys (see keys.rs): the tiers of next placements,
--            player_tier_set's tiers, and the round keys, which an erasure
--            clears of the player
--   history_registry   KEYS index of the tag's history registry (its
--            history and best hashes, which an erasure clears of the player)
-- ARGV[2]  the event's marker (Const.MARKER_BYTES bytes)
--
-- Returns the error LOST, having done nothing, when the tag is not
-- registered (registered.lua); otherwise a code: APPLIED (or nothing to
-- do), DUPLICATE, REDELIVERED (or the refusal remembered for the record),
-- OUT_OF_RANGE, PERIOD_CLOSED (every period named is sealed).

local h = cmsgpack.unpack(ARGV[1])
local member, op = h.member, h.op
local registry, hidden_set = KEYS[h.registry], KEYS[h.hidden]
local call, fmt = redis.call, Value.fmt

local lost = Registered.check(KEYS[h.offsets])
if lost then return lost end
local offsets = Offsets.open(KEYS[h.offsets], { h.field }, h.refused, h.ttl)
if h.offset <= offsets.recorded[1] then return (offsets.redelivered(1, h.offset)) end
offsets.record({ h.offset })
local markers = Markers.open(h.seen, h.ttl)
if markers.seen({ ARGV[2] })[1] then return Codes.DUPLICATE end

-- A refusal is remembered, so that a redelivery of the record reports it
-- again; the marker is not set, so a retry is decided anew.
local function refuse(code)
  offsets.refuse(1, h.offset, code)
  return code
end

-- Period ids of the key kinds a period key can be: live ones keep value
-- counts beside their dense index; sealed snapshots (":final") and rolling
-- boards ("r:") have a dense index only; a rolling build's staging keys
-- ("_roll:") neither.
local function starts(id, prefix)
  return string.sub(id, 1, #prefix) == prefix
end
local function is_build(id)
  return starts(id, Const.ROLL_BUILD_PREFIX)
end
local function is_live(id)
  local final = Const.FINAL_SUFFIX
  return string.sub(id, -#final) ~= final and not starts(id, Const.ROLLING_PREFIX) and not is_build(id)
end
local function has_shadow(id)
  return not starts(id, Const.ROLLING_PREFIX) and not is_build(id)
end

-- What a dense index counts of member e, stored score s: the stored score,
-- or on boards ranked by several columns the member's row key.
local function dense_of(e, s)
  if h.rows then return string.sub(e, 1, h.row_len) end
  return s
end

-- Members of period key k (id) moved: delta maps what the dense index
-- counts (dense_of) to +1 (a member now holds it) or -1 (one no longer
-- does). The dense index follows (dense.lua): counted on live keys, by what
-- the key holds on the others.
local function dense_moved(k, id, delta)
  local index = h.dense .. id
  if h.rows then
    if not h.dense_on then return end
    if is_live(id) then return Dense.settle(index, h.counts .. id, delta, true) end
    for row, d in pairs(delta) do
      if d < 0 then Dense.leave_uncounted_row(k, index, row) else call('ZADD', index, 0, row) end
    end
    return
  end
  if is_live(id) then
    if not h.dense_on then return end
    local names = {}
    for s, d in pairs(delta) do
      local name = fmt(Value.of(s, h.shift))
      names[name] = (names[name] or 0) + d
    end
    Dense.settle(index, h.counts .. id, names)
    return
  end
  for s, d in pairs(delta) do
    local v = Value.of(s, h.shift)
    if d < 0 then
      Dense.leave_uncounted(k, index, v, fmt(v), h.shift)
    elseif h.dense_on then
      Dense.add_uncounted(index, { fmt(v) })
    end
  end
end

-- Top-K: a live key over its limit drops its worst members, with their
-- metadata (on boards ranked by several columns, their rows too).
local function trim(k, id)
  if not is_live(id) then return end
  local victims = TopK.trim(k, h.top_k, h.desc)
  local gone = {}
  for i = 1, #victims, 2 do
    local d = dense_of(victims[i], victims[i + 1])
    gone[d] = (gone[d] or 0) - 1
    local player = victims[i]
    if h.rows then
      player = string.sub(victims[i], h.row_prefix + 1)
      call('HDEL', h.rows .. id, player)
    end
    call('HDEL', h.meta .. id, player)
  end
  dense_moved(k, id, gone)
end

-- Every period key of the tag with its id; ids whose keys are all gone
-- leave the registry.
local function period_keys()
  local out, n = {}, #h.period
  for _, k in ipairs(call('SMEMBERS', registry)) do
    local id = string.sub(k, n + 1)
    if call('EXISTS', k) == 0 and call('EXISTS', h.shadow .. id) == 0 then
      call('SREM', registry, k)
    else
      out[#out + 1] = { k, id }
    end
  end
  return out
end

-- The member's entry in period id's key (and shadow): the player id, or
-- on boards ranked by several columns their row's first bytes and the
-- player id (nil without a row there).
local function entry_of(id)
  if not h.rows then return member end
  local row = call('HGET', h.rows .. id, member)
  return row and (string.sub(row, 1, h.row_prefix) .. member)
end

-- Removes the member from period key k (id), its shadow and the member's
-- entries in the key's hashes.
local function remove_from(k, id)
  local e = entry_of(id)
  if e then
    local s = call('ZSCORE', k, e)
    if s then
      call('ZREM', k, e)
      dense_moved(k, id, { [dense_of(e, s)] = -1 })
    end
    call('ZREM', h.shadow .. id, e)
  end
  for _, prefix in ipairs({ h.times, h.meta, h.attempts, h.rows }) do call('HDEL', prefix .. id, member) end
end

local hidden = call('SISMEMBER', hidden_set, member) == 1

-- A correction: the new stored score in each open period named (a set's,
-- or the adjusted total, refused whole if any total would leave the range).
local function correct()
  local open = {}
  for _, p in ipairs(h.periods) do
    local k = h.period .. p.id
    if not h.sealed or call('HEXISTS', KEYS[h.sealed], k) == 0 then
      local target = hidden and h.shadow .. p.id or k
      local old = call('ZSCORE', target, member)
      local new = h.stored
      if op == 'adjust' then
        local total = h.delta
        if old then total = total + Value.of(old, h.shift) end
        if math.abs(total) > h.max_value then return refuse(Codes.OUT_OF_RANGE) end
        new = total * h.shift + h.tie
      end
      open[#open + 1] = { k = k, id = p.id, at = p.expire_at, target = target, old = old, new = new }
    end
  end
  if #open == 0 then return refuse(Codes.PERIOD_CLOSED) end
  for _, p in ipairs(open) do
    local new_s = fmt(p.new)
    call('SADD', registry, p.k)
    call('ZADD', p.target, new_s, member)
    if not hidden then
      local delta = { [new_s] = 1 }
      if p.old then delta[p.old] = (delta[p.old] or 0) - 1 end
      dense_moved(p.k, p.id, delta)
    end
    if h.mode == 'latest' then
      -- An older event arriving later must not undo the correction.
      local t = tonumber(call('HGET', h.times .. p.id, member))
      if not t or t < h.ts then call('HSET', h.times .. p.id, member, fmt(h.ts)) end
    end
    Expiry.at(p.at, { p.k, p.target, h.dense .. p.id, h.counts .. p.id, h.times .. p.id }, true)
    if not hidden then trim(p.k, p.id) end
  end
  return nil
end

-- A correction of a board ranked by several columns: the row replaces the
-- player's in each open period named (moved to the member it makes).
local function set_row()
  local open = {}
  for _, p in ipairs(h.periods) do
    local k = h.period .. p.id
    if not h.sealed or call('HEXISTS', KEYS[h.sealed], k) == 0 then
      open[#open + 1] = { k = k, id = p.id, at = p.expire_at }
    end
  end
  if #open == 0 then return refuse(Codes.PERIOD_CLOSED) end
  local new = string.sub(h.row, 1, h.row_prefix) .. member
  for _, p in ipairs(open) do
    local target = hidden and h.shadow .. p.id or p.k
    local old = entry_of(p.id)
    if old then call('ZREM', target, old) end
    call('SADD', registry, p.k)
    call('ZADD', target, 0, new)
    call('HSET', h.rows .. p.id, member, h.row)
    if not hidden then
      local delta = { [dense_of(new)] = 1 }
      if old then delta[dense_of(old)] = (delta[dense_of(old)] or 0) - 1 end
      dense_moved(p.k, p.id, delta)
    end
    Expiry.at(p.at, { p.k, target, h.rows .. p.id, h.dense .. p.id, h.counts .. p.id }, true)
    if not hidden then trim(p.k, p.id) end
  end
  return nil
end

-- A removal, hiding, unhiding or erasure walks the tag's period keys and may
-- change sealed snapshots and rolling boards: their version hashes rise
-- (with their keys' expiry, taken while the keys still exist).
local tag_keys = {}
if op ~= 'set' and op ~= 'set_row' and op ~= 'adjust' and op ~= 'tier' then
  tag_keys = period_keys()
  for _, p in ipairs(tag_keys) do
    local id, versions = p[2], KEYS[h.versions]
    if not is_live(id) and not is_build(id) then
      call('HINCRBY', versions .. id, 'admin', 1)
      Expiry.copy(p[1], versions .. id)
    end
  end
end

if op == 'set' or op == 'adjust' then
  local refused = correct()
  if refused then return refused end
elseif op == 'set_row' then
  local refused = set_row()
  if refused then return refused end
elseif op == 'remove' then
  if h.period_id == '' then
    for _, p in ipairs(tag_keys) do remove_from(p[1], p[2]) end
  else
    remove_from(h.period .. h.period_id, h.period_id)
  end
elseif op == 'hide' then
  call('SADD', hidden_set, member)
  for _, p in ipairs(tag_keys) do
    local k, id = p[1], p[2]
    local e = entry_of(id)
    local s = e and call('ZSCORE', k, e)
    if s then
      call('ZREM', k, e)
      dense_moved(k, id, { [dense_of(e, s)] = -1 })
      -- A rolling board is rebuilt from the days, which no longer hold the player.
      if has_shadow(id) then
        call('ZADD', h.shadow .. id, s, e)
        Expiry.copy(k, h.shadow .. id)
      end
    end
  end
elseif op == 'unhide' then
  call('SREM', hidden_set, member)
  for _, p in ipairs(tag_keys) do
    local k, id = p[1], p[2]
    local shadow = h.shadow .. id
    local e = entry_of(id)
    local s = e and call('ZSCORE', shadow, e)
    if s then
      call('ZREM', shadow, e)
      call('ZADD', k, s, e)
      dense_moved(k, id, { [dense_of(e, s)] = 1 })
      -- The key (and its index) may have been made just now: they expire with the shadow.
      for _, key in ipairs({ k, h.dense .. id, h.counts .. id }) do Expiry.copy(shadow, key) end
      trim(k, id)
    end
  end
elseif op == 'erase' then
  for _, p in ipairs(tag_keys) do remove_from(p[1], p[2]) end
  call('SREM', hidden_set, member)
  call('DEL', KEYS[h.rate_key])
  -- Integrity: the player's held events, pending and decided, and their
  -- gain window. Decided ones are found by a walk of the held events.
  call('HDEL', KEYS[h.gain_key], member)
  call('DEL', KEYS[h.held_times])
  for _, place in ipairs(call('ZRANGE', KEYS[h.held_player], 0, -1)) do call('ZREM', KEYS[h.held_queue], place) end
  call('DEL', KEYS[h.held_player])
  local cursor = '0'
  repeat
    local page = call('HSCAN', KEYS[h.held], cursor, 'COUNT', 1000)
    cursor = page[1]
    for x = 1, #page[2], 2 do
      if cmsgpack.unpack(page[2][x + 1])[2] == member then call('HDEL', KEYS[h.held], page[2][x]) end
    end
  until cursor == '0'
  -- Leagues: out of every round's cohorts, waiting players and results (a
  -- cohort keeps its places: the others move up), and out of the tiers.
  -- History: out of every sealed period's standings and every best rank.
  for _, registry in ipairs({ KEYS[h.league_registry], KEYS[h.history_registry] }) do
    for _, k in ipairs(call('SMEMBERS', registry)) do
      local kind = call('TYPE', k).ok
      if kind == 'zset' then
        call('ZREM', k, member)
      elseif kind == 'hash' then
        call('HDEL', k, member)
      else
        call('SREM', registry, k)
      end
    end
  end
  call('HDEL', KEYS[h.league_tiers], member)
  call('HDEL', KEYS[h.league_overrides], member)
elseif op == 'tier' then
  call('HSET', KEYS[h.league_tiers], member, h.tier)
  call('HSET', KEYS[h.league_overrides], member, h.tier)
end

markers.add(1)
markers.flush()
return Codes.APPLIED
