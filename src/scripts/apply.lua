-- apply.lua: applies a batch of events to ONE board tag (one hash slot), atomically.
--
-- For each event, in order: a record at or below the tag's recorded offset for
-- its topic-partition is a redelivery and changes nothing; otherwise the
-- offset advances, the dedupe marker is set with SET NX EX, and only when the
-- marker is new (and the rate limit, value range and sealing allow) are the
-- period writes made. A marker is never set without its writes, nor writes
-- made without the marker, because the script is atomic and checks everything
-- that can refuse an event before its first write.
--
-- The call works in three phases, so that its cost in commands does not grow
-- with one command per event and period:
--   1. read: one ZMSCORE per period key (and one HMGET of event times for
--      "latest") for every member of the batch;
--   2. decide: the events, in order, against those values held in the
--      script (a member that appears twice sees its own earlier write); only
--      the markers, refusals and rate-limit windows are written here;
--   3. write: per period key, one variadic ZADD of the members whose value
--      moved, then top-K trimming, the dense index and the expiry.
--
-- Stored scores are packed: stored = value * SHIFT + tie (see src/score.rs),
-- SHIFT = 1 without a tie-break. Each period key has a dense index (a zset of
-- its distinct values) and a count of the members holding each value (a hash
-- value -> members), kept exact here so dense ranks are read without
-- scanning the board: a value joins the index when its count leaves 0 and
-- leaves it when its count returns to 0.
--
-- KEYS[1]             the tag's offsets hash (field "<topic>:<partition>" -> last applied offset)
-- KEYS[1 + j]         period key j, j = 1..P
-- KEYS[1 + P + j]     dense index of period key j
-- KEYS[1 + 2P + j]    value counts of period key j's dense index
-- KEYS[1 + 3P + j]    op "latest" only: hash member -> event time of its value in period key j
-- KEYS[1 + AP + i]    the dedupe marker of event i (AP = 4P for "latest", 3P otherwise)
-- KEYS[#KEYS]         boards that seal periods only: the tag's sealed hash
--                     (period key -> close time); a sealed period takes no write
--
-- ARGV[1]             op: "sum" (add to the total), "gt" / "lt" (keep the best), "latest" (newest event wins)
-- ARGV[2]             dedupe ttl, seconds
-- ARGV[3]             refusal key prefix ("<prefix>:{tag}:_refused:")
-- ARGV[4]             SHIFT (2^tie bits)
-- ARGV[5]             largest |value| allowed
-- ARGV[6]             "desc" or "asc": which end of a board is best
-- ARGV[7]             top-K: members kept per period key, 0 for no limit
-- ARGV[8]             rate limit: events per window per member, 0 for none
-- ARGV[9]             rate limit: window, ms
-- ARGV[10]            rate limit key prefix ("<prefix>:{tag}:_rl:")
-- ARGV[11]            "1" to keep the dense indexes, "0" for a board without dense ranks
-- ARGV[12]            "1" if the board seals its periods (the last key is the sealed hash)
-- ARGV[13]            P
-- ARGV[13 + j]        EXPIREAT seconds of period key j (and its index), "0" for none
-- ARGV[14 + P]        F: how many topic-partition fields follow
-- ARGV[14 + P + f]    field f, "<topic>:<partition>"
-- ARGV[15 + P + F]    the batch, one MessagePack array (decoded in C by cmsgpack, so
--                     numbers arrive as numbers), flat:
--                     M, then the batch's M distinct members;
--                     for each period key j = 1..P: L, then the indexes (into the
--                     members, 1-based) of the L distinct members written to it;
--                     then per event: f, offset, m, num, tie, ts, W, then W
--                     period-key indexes (1-based)
--                     f: index of the event's field; m: index of its member; num:
--                     the delta for "sum", the packed stored score otherwise;
--                     ts: the event time, epoch ms
--                     (the grouping is done by the caller, so that the script
--                     keeps its per-member state in tables indexed by number)
--
-- Returns one integer per event:
--   1 applied, 2 duplicate event_id (marker present), 3 redelivered offset,
--   4 refused: score_out_of_range (a total would pass the allowed value),
--   5 refused: rate_limited,
--   6 refused: period_closed (every period of the event is sealed already).
-- Every period key written is added to the tag's registry set
-- ("<prefix>:{tag}:_keys"), which erase.lua walks.
-- A refusal is remembered (under the refusal prefix, EX ttl) so that a
-- redelivery of the record reports the same refusal, not a duplicate.

local op = ARGV[1]
local ttl = ARGV[2]
local refused_prefix = ARGV[3]
local shift = tonumber(ARGV[4])
local maxv = tonumber(ARGV[5])
local desc = ARGV[6] == 'desc'
local top_k = tonumber(ARGV[7])
local rate_events = tonumber(ARGV[8])
local rate_window = tonumber(ARGV[9])
local rl_prefix = ARGV[10]
local dense_on = ARGV[11] == '1'
local seal_on = ARGV[12] == '1'
local np = tonumber(ARGV[13])
local offsets_key = KEYS[1]
local latest = op == 'latest'
local is_sum = op == 'sum'
local marker_base = 1 + 3 * np
if latest then marker_base = 1 + 4 * np end
local CHUNK = 1000

-- Globals read once: a global is a table lookup each time it is used.
local floor = math.floor
local tonumber = tonumber
local call = redis.call

local format = string.format
-- Integers reach Redis as decimal strings made here: a number argument of
-- redis.call is converted by Redis with "%.17g", which costs several times more.
local function fmt(n)
  return format('%d', n)
end

-- Runs a variadic command on key over list (already flat), CHUNK items of
-- step arguments at a time (Lua's unpack has a stack limit).
local function variadic(cmd, key, list, step)
  local n = #list
  for c = 1, n, CHUNK * step do
    call(cmd, key, unpack(list, c, math.min(c + CHUNK * step - 1, n)))
  end
end

-- The sliding window (ts - window, ts] of admitted events: true if one more fits.
local function admit(member, ts, id)
  local rl = rl_prefix .. member
  if call('ZCOUNT', rl, '(' .. (ts - rate_window), ts) >= rate_events then
    return false
  end
  call('ZADD', rl, ts, id)
  -- Entries older than two windows can no longer matter, unless events
  -- arrive more than a window out of order; this bounds the set's size.
  call('ZREMRANGEBYSCORE', rl, '-inf', '(' .. (ts - 2 * rate_window))
  call('PEXPIRE', rl, 2 * rate_window + 86400000)
  return true
end

-- A sealed period is frozen: its final snapshot was taken from it.
local sealed = {}
if seal_on then
  for j = 1, np do
    sealed[j] = call('HEXISTS', KEYS[#KEYS], KEYS[1 + j]) == 1
  end
end

-- Phase 1: every member's current value in each open period key. The
-- batch's member m is flat[1 + m]; period key j's members are
-- flat[at[j] .. at[j] + len[j] - 1] (member indexes).
local nf = tonumber(ARGV[14 + np])
local fields = {}
for f = 1, nf do fields[f] = ARGV[14 + np + f] end
local flat = cmsgpack.unpack(ARGV[15 + np + nf])
local at, len = {}, {}
local a = flat[1] + 2
for j = 1, np do
  len[j], at[j] = flat[a], a + 1
  a = a + 1 + flat[a]
end
local first_event = a

-- cur[j][m]: the stored score (false: absent), as the events see it;
-- base[j][m]: the stored score before this call; times[j][m]: the event
-- time of a "latest" value.
-- base_str[j][m]: with SHIFT 1 and dense indexes, the stored score as Redis
-- wrote it, which is also the value's name in the dense index.
local cur, base, times, base_str = {}, {}, {}, {}
local plain = shift == 1 and dense_on
for j = 1, np do
  if not sealed[j] and len[j] > 0 then
    local c, b, t, bs = {}, {}, {}, {}
    for s = at[j], at[j] + len[j] - 1, CHUNK do
      local e = math.min(s + CHUNK - 1, at[j] + len[j] - 1)
      local names = {}
      for x = s, e do names[x - s + 1] = flat[1 + flat[x]] end
      local scores = call('ZMSCORE', KEYS[1 + j], unpack(names))
      local ts
      if latest then ts = call('HMGET', KEYS[1 + 3 * np + j], unpack(names)) end
      for x = s, e do
        local m, score = flat[x], scores[x - s + 1]
        local v = false
        if score then
          v = tonumber(score)
          if plain then bs[m] = score end
        end
        c[m], b[m] = v, v
        if latest and ts[x - s + 1] then t[m] = tonumber(ts[x - s + 1]) end
      end
    end
    cur[j], base[j], times[j], base_str[j] = c, b, t, bs
  end
end

-- Phase 2: decide each event in order against the values held above.
local last_off, dirty, touched, out = {}, {}, {}, {}
-- moved[j][m] = true: on a "latest" board, member m's event time in period
-- key j changed (its value may not have). Elsewhere a member moved if and
-- only if its value did, which phase 3 sees by comparing.
local moved = {}
if latest then
  for j = 1, np do moved[j] = {} end
end

local i = 0
a = first_event
local nflat = #flat
while a <= nflat do
  i = i + 1
  local f, off, m, num = flat[a], flat[a + 1], flat[a + 2], flat[a + 3]
  local first, stop = a + 7, a + 6 + flat[a + 6]
  local field = fields[f]
  local last = last_off[f]
  if last == nil then
    local v = call('HGET', offsets_key, field)
    if v then last = tonumber(v) else last = -1 end
    last_off[f] = last
  end
  if off <= last then
    local r = call('GET', refused_prefix .. field .. ':' .. fmt(off))
    if r then out[i] = tonumber(r) else out[i] = 3 end
  else
    last_off[f], dirty[f] = off, true
    local code = 1
    local marker = KEYS[marker_base + i]
    if not call('SET', marker, '1', 'NX', 'EX', ttl) then
      code = 2
    else
      local open = not seal_on
      -- Only a sum can leave the allowed range, and only sealing can close
      -- every period of the event.
      if is_sum or seal_on then
        for w = first, stop do
          local j = flat[w]
          if not sealed[j] then
            open = true
            if is_sum then
              local old = cur[j][m]
              local total = num
              if old then total = floor(old / shift) + num end
              if total > maxv or total < -maxv then code = 4 end
            end
          end
        end
      end
      if code == 1 and not open then code = 6 end
      if code == 1 and rate_events > 0 and not admit(flat[1 + m], flat[a + 5], field .. ':' .. fmt(off)) then
        code = 5
      end
      if code ~= 1 then call('DEL', marker) end
    end
    if code == 1 then
      for w = first, stop do
        local j = flat[w]
        -- A sealed period is skipped: the event still counts on the board's open periods.
        if not sealed[j] then
          local c = cur[j]
          local old = c[m]
          if is_sum then
            local total = num
            if old then total = floor(old / shift) + num end
            c[m] = total * shift + flat[a + 4]
          elseif latest then
            local ts = flat[a + 5]
            local seen = times[j][m]
            if not seen or ts > seen then
              times[j][m] = ts
              c[m] = num
              moved[j][m] = true
            end
          elseif not old or (op == 'gt' and num > old) or (op == 'lt' and num < old) then
            c[m] = num
          end
          touched[j] = true
        end
      end
    elseif code >= 4 then
      call('SET', refused_prefix .. field .. ':' .. fmt(off), code, 'EX', ttl)
    end
    out[i] = code
  end
  a = stop + 1
end

-- Phase 3: the writes.
for f in pairs(dirty) do
  call('HSET', offsets_key, fields[f], fmt(last_off[f]))
end

-- Net change of the member count of each value of period key j, by the
-- value's decimal name.
local function count(delta, v, d)
  delta[v] = (delta[v] or 0) + d
end

-- The decimal name of the value of a stored score (str: the score as a
-- decimal string, when one is at hand).
local function value_name(stored, str)
  if shift == 1 and str then return str end
  return fmt(floor(stored / shift))
end

-- The one field of a value-count hash that is not a value (see settle).
local PIN_FIELD = 'encoding'
local PIN_VALUE = 'a hash table: this value is longer than hash-max-listpack-value (64 bytes)'

-- Member counts as strings, made once per call.
local small = {}
for n = 1, 16 do small[n] = fmt(n) end

-- Makes period key j's dense index and value counts exact again: one HMGET
-- of the counts of the values that changed, then variadic writes.
local function settle(j, delta)
  local vals, nv = {}, 0
  for v, d in pairs(delta) do
    if d ~= 0 then
      nv = nv + 1
      vals[nv] = v
    end
  end
  local index, counts = KEYS[1 + np + j], KEYS[1 + 2 * np + j]
  if nv == 0 then return end
  -- A hash of up to hash-max-listpack-entries (512 by default) fields is a
  -- listpack, scanned end to end on every lookup; a value longer than
  -- hash-max-listpack-value makes it a hash table for good.
  call('HSETNX', counts, PIN_FIELD, PIN_VALUE)
  local set, del, add, rem = {}, {}, {}, {}
  local ns, nd, na, nr = 0, 0, 0, 0
  for s = 1, nv, CHUNK do
    local e = math.min(s + CHUNK - 1, nv)
    local olds = call('HMGET', counts, unpack(vals, s, e))
    for x = s, e do
      local v = vals[x]
      local old = tonumber(olds[x - s + 1]) or 0
      local new = old + delta[v]
      if new > 0 then
        set[ns + 1], set[ns + 2] = v, small[new] or fmt(new)
        ns = ns + 2
        if old <= 0 then
          add[na + 1], add[na + 2] = v, v
          na = na + 2
        end
      elseif old > 0 then
        nd, nr = nd + 1, nr + 1
        del[nd], rem[nr] = v, v
      end
    end
  end
  if #set > 0 then variadic('HSET', counts, set, 2) end
  if #del > 0 then variadic('HDEL', counts, del, 1) end
  if #add > 0 then variadic('ZADD', index, add, 2) end
  if #rem > 0 then variadic('ZREM', index, rem, 1) end
end

local registry = string.sub(refused_prefix, 1, #refused_prefix - #'_refused:') .. '_keys'
for j in pairs(touched) do
  local k = KEYS[1 + j]
  -- The registry lets an erasure find every period key of the tag.
  call('SADD', registry, k)
  local delta = {}
  local pairs_, np_ = {}, 0
  local stamps = {}
  local c, b, bs = cur[j], base[j], base_str[j]
  for x = at[j], at[j] + len[j] - 1 do
    local m = flat[x]
    local old, new = b[m], c[m]
    if old ~= new then
      local new_str = format('%d', new)
      np_ = np_ + 2
      pairs_[np_ - 1] = new_str
      pairs_[np_] = flat[1 + m]
      if dense_on then
        -- The values' decimal names (see value_name), inline: this
        -- runs for every member written.
        local name
        if old then
          name = shift == 1 and bs[m] or format('%d', floor(old / shift))
          delta[name] = (delta[name] or 0) - 1
        end
        name = shift == 1 and new_str or format('%d', floor(new / shift))
        delta[name] = (delta[name] or 0) + 1
      end
    end
    if latest and moved[j][m] then
      stamps[#stamps + 1] = flat[1 + m]
      stamps[#stamps + 1] = fmt(times[j][m])
    end
  end
  if np_ > 0 then variadic('ZADD', k, pairs_, 2) end
  if #stamps > 0 then variadic('HSET', KEYS[1 + 3 * np + j], stamps, 2) end
  if top_k > 0 then
    -- Top-K: keeps the best top_k members.
    local card = call('ZCARD', k)
    if card > top_k then
      local victims
      if desc then
        victims = call('ZRANGE', k, 0, card - top_k - 1, 'WITHSCORES')
        call('ZREMRANGEBYRANK', k, 0, card - top_k - 1)
      else
        victims = call('ZRANGE', k, top_k, -1, 'WITHSCORES')
        call('ZREMRANGEBYRANK', k, top_k, -1)
      end
      for v = 2, #victims, 2 do
        count(delta, value_name(tonumber(victims[v]), victims[v]), -1)
      end
    end
  end
  if dense_on then settle(j, delta) end
  local at = ARGV[13 + j]
  if at ~= '0' then
    call('EXPIREAT', k, at)
    if dense_on then
      call('EXPIREAT', KEYS[1 + np + j], at)
      call('EXPIREAT', KEYS[1 + 2 * np + j], at)
    end
    if latest then call('EXPIREAT', KEYS[1 + 3 * np + j], at) end
  end
end
return out
