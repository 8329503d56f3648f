-- admin.lua: one admin event (a correction or moderation) on ONE board tag,
-- atomically, at most once per record and once per event id: the same
-- offset check and the same dedupe markers as apply.lua, so neither a
-- replayed admin event nor a producer's retry of it (same event id, later
-- offset) takes effect twice.
--
-- Hidden players: a tag's hidden set holds the players taken out of every
-- read of others. Their values live in shadow keys ("_hid:<period>", one per
-- period key, same expiry) instead of the period keys, so the period keys,
-- their dense indexes, totals and ranks hold only the visible players;
-- apply.lua writes a hidden player's later events to the shadow keys.
--
-- KEYS[1]   the tag's offsets hash
-- KEYS[2]   the tag's registry of period keys (a set, filled by apply.lua)
-- KEYS[3]   the tag's hidden set
-- KEYS[4]   what the version hashes of the tag's sealed snapshots and rolling
--           boards start with (on the tag's slot; completed with a period id):
--           their `admin` counter rises with a removal, hiding, unhiding or
--           erasure, which may change them
-- ARGV[1]   field "<topic>:<partition>", ARGV[2] offset, ARGV[3] the member (player id)
-- ARGV[4]   dedupe marker hash prefix ("<prefix>:{tag}:_seen:"), completed with n (see markers.lua)
-- ARGV[5]   dedupe ttl, seconds          ARGV[6] the event's marker (12 bytes)
-- ARGV[7]   refusal key prefix ("<prefix>:{tag}:_refused:")
-- ARGV[8]   what the tag's period keys start with ("<prefix>:{tag}:"): the rest is the period id
-- ARGV[9]   dense index prefix ("..._dense:")     ARGV[10] value counts prefix ("..._dcount:")
-- ARGV[11]  event times prefix ("..._ts:")        ARGV[12] metadata prefix ("..._meta:")
-- ARGV[13]  shadow key prefix ("..._hid:")        ARGV[14] the member's rate-limit window key
-- ARGV[15]  the board's write op: "sum" | "gt" | "lt" | "latest"
-- ARGV[16]  SHIFT      ARGV[17] "desc" | "asc"     ARGV[18] top-K (0: none)
-- ARGV[19]  "1" if the board keeps dense indexes  ARGV[20] the tag's sealed hash ("" if none)
-- ARGV[21]  op: "set" | "adjust" | "remove" | "hide" | "unhide" | "erase"
-- ARGV[22]  attempts prefix ("..._att:"): a removal or an erasure gives the player their attempts back
-- set:      ARGV[23] stored score, ARGV[24] event time (ms), then (period id, EXPIREAT or "0") pairs
-- adjust:   ARGV[23] delta, ARGV[24] event time, ARGV[25] tie component, ARGV[26] largest |value|,
--           then (period id, EXPIREAT or "0") pairs
-- remove:   ARGV[23] the period id, or "" for every period key of the tag
--
-- Returns the error LOST, having done nothing, when the tag's offsets hash
-- has no "registered" field (its data is gone, see registered.lua); otherwise
-- 1 applied (or nothing to do), 2 duplicate event id, 3 redelivered
-- offset (or the refusal remembered for it), 4 refused: score_out_of_range,
-- 6 refused: period_closed (every period named is sealed).

local field, off_s, member = ARGV[1], ARGV[2], ARGV[3]
local refused_prefix, period_prefix = ARGV[7], ARGV[8]
local dense_prefix, counts_prefix, times_prefix = ARGV[9], ARGV[10], ARGV[11]
local meta_prefix, shadow_prefix = ARGV[12], ARGV[13]
local mode, shift, desc, top_k = ARGV[15], tonumber(ARGV[16]), ARGV[17] == 'desc', tonumber(ARGV[18])
local dense_on, sealed_hash, op = ARGV[19] == '1', ARGV[20], ARGV[21]
local attempts_prefix = ARGV[22]
local hidden_set, registry = KEYS[3], KEYS[2]
local call, floor, format = redis.call, math.floor, string.format

-- Lost data: a tag whose registration is gone takes no write (registered.lua).
local lost = Registered.check(KEYS[1])
if lost then return lost end

local last = call('HGET', KEYS[1], field)
if last and tonumber(off_s) <= tonumber(last) then
  return tonumber(call('GET', refused_prefix .. field .. ':' .. off_s)) or 3
end
call('HSET', KEYS[1], field, off_s)
local markers = Markers.open(ARGV[4], tonumber(ARGV[5]))
if markers.seen({ ARGV[6] })[1] then return 2 end

-- A refusal is remembered (like apply.lua's), so that a redelivery of the
-- record reports it again; the marker is not set, so a retry is decided anew.
local function refuse(code)
  call('SET', refused_prefix .. field .. ':' .. off_s, code, 'EX', ARGV[5])
  return code
end

local function num(n) return format('%d', n) end

-- Period ids of the key kinds a period key can be: live ones keep value
-- counts beside their dense index; sealed snapshots (":final") and rolling
-- boards ("r:") have a dense index only; a rolling build's staging keys
-- ("_roll:") neither.
local function is_live(id)
  return string.sub(id, -6) ~= ':final' and string.sub(id, 1, 2) ~= 'r:' and string.sub(id, 1, 6) ~= '_roll:'
end
local function has_shadow(id)
  return string.sub(id, 1, 2) ~= 'r:' and string.sub(id, 1, 6) ~= '_roll:'
end

-- Member m with stored score s has left period key k (id): its value leaves
-- the dense index when no member holds it any more. (A value count is kept
-- only from 2 up: no field, one member; see apply.lua.)
local function dense_out(k, id, s)
  local v = floor(tonumber(s) / shift)
  local vs = num(v)
  local counts = counts_prefix .. id
  if call('HEXISTS', counts, vs) == 1 and call('HINCRBY', counts, vs, -1) <= 1 then
    call('HDEL', counts, vs)
  end
  local lo = v * shift
  if call('ZCOUNT', k, num(lo), num(lo + shift - 1)) == 0 then
    call('ZREM', dense_prefix .. id, vs)
  end
end

-- A member with stored score s has joined period key k (id).
local function dense_in(id, s)
  if not dense_on then return end
  local vs = num(floor(tonumber(s) / shift))
  -- A value new to the index is held once (no count); one held already
  -- counts one more, from an implicit 1 to 2 when it had no field.
  if call('ZADD', dense_prefix .. id, vs, vs) == 0 and is_live(id) then
    local counts = counts_prefix .. id
    if call('HINCRBY', counts, vs, 1) == 1 then call('HSET', counts, vs, 2) end
  end
end

-- Top-K: a live key over its limit drops its worst members, with their metadata.
local function trim(k, id)
  if top_k == 0 or not is_live(id) then return end
  local card = call('ZCARD', k)
  if card <= top_k then return end
  local victims
  if desc then
    victims = call('ZRANGE', k, 0, card - top_k - 1, 'WITHSCORES')
  else
    victims = call('ZRANGE', k, top_k, -1, 'WITHSCORES')
  end
  for i = 1, #victims, 2 do
    call('ZREM', k, victims[i])
    dense_out(k, id, victims[i + 1])
    call('HDEL', meta_prefix .. id, victims[i])
  end
end

-- Copies key k's expiry to key to (a key that gets written beside it).
local function same_expiry(k, to)
  local at = call('PEXPIRETIME', k)
  if at > 0 then call('PEXPIREAT', to, at) end
end

-- Every period key of the tag with its id; ids whose keys are all gone
-- leave the registry.
local function period_keys()
  local out = {}
  local n = #period_prefix
  for _, k in ipairs(call('SMEMBERS', registry)) do
    local id = string.sub(k, n + 1)
    local shadow = shadow_prefix .. id
    if call('EXISTS', k) == 0 and call('EXISTS', shadow) == 0 then
      call('SREM', registry, k)
    else
      out[#out + 1] = { k, id }
    end
  end
  return out
end

-- Removes the member from period key k (id), its shadow and the member's
-- entries in the key's hashes.
local function remove_from(k, id)
  local s = call('ZSCORE', k, member)
  if s then
    call('ZREM', k, member)
    dense_out(k, id, s)
  end
  call('ZREM', shadow_prefix .. id, member)
  call('HDEL', times_prefix .. id, member)
  call('HDEL', meta_prefix .. id, member)
  call('HDEL', attempts_prefix .. id, member)
end

local hidden = call('SISMEMBER', hidden_set, member) == 1

-- A removal, hiding, unhiding or erasure walks the tag's period keys (read
-- once, here) and may change sealed snapshots and rolling boards: their
-- version hashes rise (with their keys' expiry, taken while the keys still
-- exist).
local tag_keys = {}
if op ~= 'set' and op ~= 'adjust' then
  tag_keys = period_keys()
  for _, p in ipairs(tag_keys) do
    local id = p[2]
    if not is_live(id) and string.sub(id, 1, 6) ~= '_roll:' then
      call('HINCRBY', KEYS[4] .. id, 'admin', 1)
      same_expiry(p[1], KEYS[4] .. id)
    end
  end
end

if op == 'set' or op == 'adjust' then
  local ts = tonumber(ARGV[24])
  local first = 25
  if op == 'adjust' then first = 27 end
  -- The periods named that are not sealed.
  local open = {}
  for a = first, #ARGV, 2 do
    local id = ARGV[a]
    local k = period_prefix .. id
    if sealed_hash == '' or call('HEXISTS', sealed_hash, k) == 0 then
      open[#open + 1] = { k, id, ARGV[a + 1] }
    end
  end
  if #open == 0 then return refuse(6) end
  -- The new stored score in each: a set's, or the adjusted total (refused
  -- whole if any period's total would leave the range).
  local new = {}
  for i, p in ipairs(open) do
    local target = p[1]
    if hidden then target = shadow_prefix .. p[2] end
    local old = call('ZSCORE', target, member)
    if op == 'set' then
      new[i] = tonumber(ARGV[23])
    else
      local total = tonumber(ARGV[23])
      if old then total = total + floor(tonumber(old) / shift) end
      if math.abs(total) > tonumber(ARGV[26]) then return refuse(4) end
      new[i] = total * shift + tonumber(ARGV[25])
    end
    p[4], p[5] = target, old
  end
  for i, p in ipairs(open) do
    local k, id, at, target, old = p[1], p[2], p[3], p[4], p[5]
    call('SADD', registry, k)
    call('ZADD', target, num(new[i]), member)
    if not hidden then
      if old then dense_out(k, id, old) end
      dense_in(id, new[i])
    end
    if mode == 'latest' then
      -- An older event arriving later must not undo the correction.
      local t = tonumber(call('HGET', times_prefix .. id, member))
      if not t or t < ts then call('HSET', times_prefix .. id, member, num(ts)) end
    end
    if at ~= '0' then
      for _, key in ipairs({ k, target, dense_prefix .. id, counts_prefix .. id, times_prefix .. id }) do
        if call('EXISTS', key) == 1 then call('EXPIREAT', key, at) end
      end
    end
    if not hidden then trim(k, id) end
  end
elseif op == 'remove' then
  if ARGV[23] == '' then
    for _, p in ipairs(tag_keys) do remove_from(p[1], p[2]) end
  else
    remove_from(period_prefix .. ARGV[23], ARGV[23])
  end
elseif op == 'hide' then
  call('SADD', hidden_set, member)
  for _, p in ipairs(tag_keys) do
    local k, id = p[1], p[2]
    local s = call('ZSCORE', k, member)
    if s then
      call('ZREM', k, member)
      dense_out(k, id, s)
      -- A rolling board is rebuilt from the days, which no longer hold the player.
      if has_shadow(id) then
        local shadow = shadow_prefix .. id
        call('ZADD', shadow, s, member)
        same_expiry(k, shadow)
      end
    end
  end
elseif op == 'unhide' then
  call('SREM', hidden_set, member)
  for _, p in ipairs(tag_keys) do
    local k, id = p[1], p[2]
    local shadow = shadow_prefix .. id
    local s = call('ZSCORE', shadow, member)
    if s then
      call('ZREM', shadow, member)
      call('ZADD', k, s, member)
      dense_in(id, s)
      -- The key (and its index) may have been made just now: they expire with the shadow.
      for _, key in ipairs({ k, dense_prefix .. id, counts_prefix .. id }) do same_expiry(shadow, key) end
      trim(k, id)
    end
  end
elseif op == 'erase' then
  for _, p in ipairs(tag_keys) do remove_from(p[1], p[2]) end
  call('SREM', hidden_set, member)
  call('DEL', ARGV[14])
end

markers.add(1)
markers.flush()
return 1
