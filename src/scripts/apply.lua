-- apply.lua: applies a batch of events to ONE board tag (one hash slot), atomically.
--
-- For each event, in order: a record at or below the tag's recorded offset for
-- its topic-partition is a redelivery and changes nothing; otherwise the
-- offset advances, and only when the event's dedupe marker is absent (and the
-- rate limit, value range and sealing allow) are the period writes made and
-- the marker set. A marker is never set without its writes, nor writes made
-- without the marker, because the script is atomic.
--
-- Dedupe markers: the tag's marker hashes "<prefix>:{tag}:_seen:<n>", kept by
-- markers.lua (which the worker puts before this script; its header has the
-- layout): a call reads all its markers with one HMGET per hash and sets
-- those of the events it applied with one HSET.
--
-- The call works in three phases, so that its cost in commands does not grow
-- with one command per event and period:
--   1. read: one ZMSCORE per period key (and one HMGET of event times for
--      "latest") for every member of the batch, and the markers' buckets;
--   2. decide: the events, in order, against those values held in the
--      script (a member that appears twice sees its own earlier write); only
--      refusals and rate-limit windows are written here;
--   3. write: the markers of the applied events, in one variadic HSET; per
--      period key, one variadic ZADD of the members whose value moved, then
--      top-K trimming, the dense index and the expiry.
--
-- Stored scores are packed: stored = value * SHIFT + tie (see src/score.rs),
-- SHIFT = 1 without a tie-break. Each period key has a dense index (a zset of
-- its distinct values) and a count of the members holding each value, kept
-- exact here so dense ranks are read without scanning the board: a value
-- joins the index when its count leaves 0 and leaves it when its count
-- returns to 0. The counts hash holds only counts of 2 or more: a value in
-- the index without a field is held by one member (most values, on boards
-- of times or large sums), so the hash costs nothing for them.
--
-- KEYS[1]             the tag's offsets hash (field "<topic>:<partition>" -> last applied offset)
-- KEYS[1 + j]         period key j, j = 1..P
-- KEYS[1 + P + j]     dense index of period key j
-- KEYS[1 + 2P + j]    value counts of period key j's dense index
-- KEYS[1 + 3P + j]    the shadow of period key j: the values of the tag's hidden players
-- KEYS[1 + 4P + j]    op "latest" only: hash member -> event time of its value in period key j
-- KEYS[1 + QP + j]    boards that keep metadata only: hash member -> the compact JSON meta of
--                     the event that explains its value in period key j (Q = 5 for "latest", else 4)
-- KEYS[1 + RP + j]    boards with max_attempts only: hash member -> events applied to period key j
--                     (R = Q, plus 1 if the board keeps metadata)
-- KEYS[#KEYS - 1]     boards that seal periods only: the tag's sealed hash
--                     (period key -> close time); a sealed period takes no write
-- KEYS[#KEYS]         the tag's hidden set (players hidden by player_hidden)
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
-- ARGV[13]            dedupe marker hash prefix ("<prefix>:{tag}:_seen:"), completed with n (see markers.lua)
-- ARGV[14]            the tag's registry of period keys ("<prefix>:{tag}:_keys")
-- ARGV[15]            "1" if the board keeps metadata (the meta hashes are in KEYS)
-- ARGV[16]            max_attempts: events a member may have applied per period key, 0 for no limit
-- ARGV[17]            P
-- ARGV[17 + j]        EXPIREAT seconds of period key j (and its index), "0" for none
-- ARGV[18 + P]        F: how many topic-partition fields follow
-- ARGV[18 + P + f]    field f, "<topic>:<partition>"
-- ARGV[18 + P + F + f] precondition of field f: the last offset of f that the
--                     call before this one on the tag carries, while that call
--                     may still be unapplied (-1: none); see "Preconditions"
-- ARGV[19 + P + 2F]   the batch, one MessagePack stream of top-level values
--                     (read in chunks by cmsgpack.unpack_limit, whose values land
--                     in arrays made in one step, and numbers arrive as numbers):
--                     M, then the batch's M distinct members;
--                     for each period key j = 1..P: L, then the indexes (into the
--                     members, 1-based) of the L distinct members written to it,
--                     or L = -1 alone when those are all M members in order;
--                     S, then S shapes: W, then W period-key indexes (1-based),
--                     the distinct lists of period keys the events write;
--                     E, then the E events' markers (12 bytes each, see
--                     markers.lua), then per
--                     event: f, offset, m, num, shape, [tie], [ts], [meta], [rts]
--                     f: index of the event's field; m: index of its member; num:
--                     the delta for "sum", the packed stored score otherwise;
--                     tie (only for "sum" with SHIFT > 1): the tie component
--                     packed with a new total; ts (only for "latest" and rate
--                     limits): the event time, epoch ms; meta (only for boards
--                     that keep metadata): the event's meta, "" for none; rts
--                     (only for boards that seal): the record timestamp, ms
--                     (the grouping is done by the caller, so that the script
--                     keeps its per-member state in tables indexed by number)
--
-- Returns the error LOST, having done nothing, when the tag's offsets hash
-- has no "registered" field (see registered.lua); the error STALE,
-- having done nothing, when a precondition does not hold; otherwise E, then (i, code) for each event i not applied, i
-- ascending, with the codes:
--   2 duplicate event_id (marker present), 3 redelivered offset,
--   4 refused: score_out_of_range (a total would pass the allowed value),
--   5 refused: rate_limited,
--   6 refused: period_closed (every period of the event is sealed already),
--   7 refused: attempts_exhausted (the member has used max_attempts in every
--     open period of the event; a period where it has attempts left takes
--     the event, counted there, and the others skip it).
-- Every other event was applied (code 1).
--
-- Hidden players (admin.lua): a player in the tag's hidden set has their
-- values in the shadow keys instead of the period keys, so their events
-- are read from and written to the shadows, and count in no dense index
-- and no top-K; everything else (offsets, markers, refusals, event times,
-- metadata) is as for any player.
--
-- Metadata: a member's meta in a period key is the meta of the event that
-- decided its value there: for "sum" the last applied event, for "gt"/"lt"
-- the event that set the best (an equal score changes nothing, so the first
-- on a tie keeps it), for "latest" the newest by event time. It is written
-- with the value in phase 3 (HSET, or HDEL when that event had none), and
-- removed with the member by top-K trimming.
-- Every period key written is added to the tag's registry set (ARGV[14]),
-- which erase.lua walks.
--
-- Key names: this script builds none of its own. Every key or key prefix it
-- touches arrives in KEYS or ARGV, laid out by src/keys.rs; it only appends
-- a member, a marker hash number or a record's position to a prefix it was given.
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
local seen_prefix = ARGV[13]
local registry = ARGV[14]
local meta_on = ARGV[15] == '1'
local att_limit = tonumber(ARGV[16])
local attempts_on = att_limit > 0
local np = tonumber(ARGV[17])
local offsets_key = KEYS[1]
local latest = op == 'latest'
local is_sum = op == 'sum'
local CHUNK = 1000

-- Globals read once: a global is a table lookup each time it is used.
local floor = math.floor
local tonumber = tonumber
local call = redis.call
local KEYS = KEYS

local format = string.format

-- Integers reach Redis as decimal strings made here: a number argument of
-- redis.call is converted by Redis with "%.17g", which costs several times more.
local function fmt(n)
  return format('%d', n)
end
-- dec(n): fmt(n), made once per call and kept in decimal. Written values repeat across
-- members (totals and personal bests cluster), and formatting is the
-- costliest step of a write in the interpreter.
local decimal = {}
local function dec(n)
  local str = decimal[n]
  if not str then
    str = format('%d', n)
    decimal[n] = str
  end
  return str
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

-- A sealed period is frozen: its final snapshot was taken from it. A
-- period closed on demand (rankflow admin close; field "<period key>:closes",
-- see keys::closes_field) refuses the events produced at or after its close
-- time (closes[j], ms) until it is sealed.
-- Lost data: a tag whose registration is gone takes no write (registered.lua).
local lost = Registered.check(offsets_key)
if lost then return lost end

local sealed, closes = {}, {}
if seal_on then
  for j = 1, np do
    local v = call('HMGET', KEYS[#KEYS - 1], KEYS[1 + j], KEYS[1 + j] .. ':closes')
    sealed[j], closes[j] = v[1] ~= false, tonumber(v[2])
  end
end

-- The batch: a MessagePack stream, read from byte pos on.
local nf = tonumber(ARGV[18 + np])
local fields = {}
for f = 1, nf do fields[f] = ARGV[18 + np + f] end
-- Preconditions. The caller sends a call while the one before it on this tag
-- is still on its way, so that Redis never waits for the client. If that
-- earlier call has not been applied (it failed), this one must not run ahead
-- of it: its offsets would make the earlier call's events look redelivered
-- when it is retried. So each field's offset must already be recorded up to
-- the last one the earlier call carries; if not, nothing is done, and the
-- caller sends this call again once the earlier one has landed.
-- recorded[f]: field f's recorded offset (-1 for none), read with one
-- HMGET for the preconditions and phase 2 (every redis.call costs Redis
-- some 6,000 instructions besides its command's own work).
local recorded = {}
for s = 1, nf, CHUNK do
  local e = math.min(s + CHUNK - 1, nf)
  local got = call('HMGET', offsets_key, unpack(fields, s, e))
  for f = s, e do recorded[f] = tonumber(got[f - s + 1]) or -1 end
end
for f = 1, nf do
  local need = tonumber(ARGV[18 + np + nf + f])
  if need >= 0 and recorded[f] < need then
    return redis.error_reply('STALE the call before this one on ' .. offsets_key .. ' has not been applied')
  end
end
local payload = ARGV[19 + np + 2 * nf]
local unpack_limit = cmsgpack.unpack_limit
local pos = 0
local function rest(next_pos, ...)
  pos = next_pos
  return {...}
end
-- The stream's next n values, as an array: unpack_limit leaves them on the
-- stack, from where {...} stores them in one step, not one table write each
-- (Lua's C stack takes a few thousand values at a time).
local TAKE = 4000
local function take(n)
  if n <= TAKE then
    if n == 0 then return {} end
    return rest(unpack_limit(payload, n, pos))
  end
  local t, k = {}, 0
  while k < n do
    local part = rest(unpack_limit(payload, math.min(TAKE, n - k), pos))
    for x = 1, #part do t[k + x] = part[x] end
    k = k + #part
  end
  return t
end
local function take1()
  local next_pos, v = unpack_limit(payload, 1, pos)
  pos = next_pos
  return v
end

local members = take(take1())
local nm = #members
-- lists[j]: the members (indexes) written to period key j, or false when
-- that is every member of the batch in order (sent as L = -1: the common
-- case, where m needs no lookup and the members list is the names list);
-- list_len[j]: how many.
local lists, list_len = {}, {}
for j = 1, np do
  local l = take1()
  if l < 0 then
    lists[j], list_len[j] = false, nm
  else
    lists[j], list_len[j] = take(l), l
  end
end
local shapes, shape_len = {}, {}
for sh = 1, take1() do
  local w = take1()
  shapes[sh], shape_len[sh] = take(w), w
end
local with_tie = is_sum and shift > 1
local with_ts = latest or rate_events > 0
local stride = 5
if with_tie then stride = stride + 1 end
local ts_at = stride + 1
if with_ts then stride = stride + 1 end
local meta_at = stride + 1
if meta_on then stride = stride + 1 end
-- The record timestamp (ms), on boards that seal: against closes[j].
local rts_at = stride + 1
if seal_on then stride = stride + 1 end
-- KEYS[meta_keys + j]: period key j's meta hash.
local meta_keys = 1 + 4 * np
if latest then meta_keys = meta_keys + np end
local times_keys = 1 + 4 * np
-- KEYS[att_keys + j]: period key j's attempts hash.
local att_keys = meta_keys
if meta_on then att_keys = att_keys + np end

-- Hidden players of the batch: hidden[m] = true (see the header).
local hidden, any_hidden = {}, false
if call('EXISTS', KEYS[#KEYS]) == 1 then
  for s = 1, nm, CHUNK do
    local e = math.min(s + CHUNK - 1, nm)
    local flags = call('SMISMEMBER', KEYS[#KEYS], unpack(members, s, e))
    for x = s, e do
      if flags[x - s + 1] == 1 then
        hidden[x], any_hidden = true, true
      end
    end
  end
end

-- Phase 1: every member's current value in each open period key.
-- cur[j][m]: the stored score (false: absent), as the events see it;
-- base[j][m]: the stored score before this call; times[j][m]: the event
-- time of a "latest" value.
-- base_str[j][m]: with SHIFT 1 and dense indexes, the stored score as Redis
-- wrote it, which is also the value's name in the dense index.
local cur, base, times, base_str = {}, {}, {}, {}
local plain = shift == 1 and dense_on
-- With SHIFT 1 a stored score is its value: no floor(stored / SHIFT).
local unit = shift == 1
for j = 1, np do
  local list, nl = lists[j], list_len[j]
  if not sealed[j] and nl > 0 then
    local c, b, t, bs = {}, {}, {}, {}
    for s = 1, nl, CHUNK do
      local e = math.min(s + CHUNK - 1, nl)
      local scores, ts
      if list then
        local names = {}
        for x = s, e do names[x - s + 1] = members[list[x]] end
        scores = call('ZMSCORE', KEYS[1 + j], unpack(names))
        if latest then ts = call('HMGET', KEYS[times_keys + j], unpack(names)) end
      else
        scores = call('ZMSCORE', KEYS[1 + j], unpack(members, s, e))
        if latest then ts = call('HMGET', KEYS[times_keys + j], unpack(members, s, e)) end
      end
      for x = s, e do
        local m, score = x, scores[x - s + 1]
        if list then m = list[x] end
        local v = false
        if score then
          -- score + 0: Lua converts the decimal string itself, without a
          -- function call (tonumber is a C function).
          v = score + 0
          if plain then bs[m] = score end
        end
        c[m], b[m] = v, v
        if latest and ts[x - s + 1] then t[m] = tonumber(ts[x - s + 1]) end
      end
    end
    -- A hidden member's value is in the shadow.
    if any_hidden then
      local names, ms = {}, {}
      for x = 1, nl do
        local m = x
        if list then m = list[x] end
        if hidden[m] then
          names[#names + 1], ms[#ms + 1] = members[m], m
        end
      end
      for s = 1, #names, CHUNK do
        local e = math.min(s + CHUNK - 1, #names)
        local scores = call('ZMSCORE', KEYS[1 + 3 * np + j], unpack(names, s, e))
        for x = s, e do
          local v = scores[x - s + 1]
          if v then v = v + 0 end
          c[ms[x]], b[ms[x]], bs[ms[x]] = v, v, nil
        end
      end
    end
    cur[j], base[j], times[j], base_str[j] = c, b, t, bs
  end
end

-- att[j][m]: the events member m has had applied to period key j (max_attempts);
-- att_moved[j][m]: that count changed in this call.
local att, att_moved = {}, {}
if attempts_on then
  for j = 1, np do
    if cur[j] then
      local list, nl, a = lists[j], list_len[j], {}
      for s = 1, nl, CHUNK do
        local e = math.min(s + CHUNK - 1, nl)
        local names = {}
        for x = s, e do
          local m = x
          if list then m = list[x] end
          names[x - s + 1] = members[m]
        end
        local got = call('HMGET', KEYS[att_keys + j], unpack(names))
        for x = s, e do
          local m = x
          if list then m = list[x] end
          a[m] = tonumber(got[x - s + 1]) or 0
        end
      end
      att[j], att_moved[j] = a, {}
    end
  end
end

-- shape_cur[sh][w]: cur of shape sh's period key w, false for a sealed
-- period (the only kind phase 1 does not read), so that the events' loop
-- below finds each of its period keys' values in one lookup.
local shape_cur = {}
for sh = 1, #shapes do
  local sc = {}
  for w = 1, shape_len[sh] do sc[w] = cur[shapes[sh][w]] or false end
  shape_cur[sh] = sc
end

-- Phase 2: decide each event in order against the values held above.
-- out: E, then (i, code) for each event not applied.
-- last_off[f]: the newest offset of field f seen; first_off[f]: its recorded one.
local last_off, first_off = {}, {}
local totals = {}
local ne = take1()
local out, nout = { ne }, 1

-- The markers: marked[i] is true when event i's marker is set already.
local markers = Markers.open(seen_prefix, tonumber(ttl))
local ids = take(ne)
local marked = markers.seen(ids)
-- marks_in[id]: the event was applied earlier in this call.
local marks_in = {}
-- moved[j][m] = true: on a "latest" board, member m's event time in period
-- key j changed (its value may not have). Elsewhere a member moved if and
-- only if its value did, which phase 3 sees by comparing.
local moved = {}
if latest then
  for j = 1, np do moved[j] = {} end
end
-- metas[j][m]: the meta ("" for none) of the event that last decided member
-- m's value in period key j in this call; only on boards that keep metadata.
local metas = {}
if meta_on then
  for j = 1, np do metas[j] = {} end
end

local per_take = floor(TAKE / stride)
-- tk: the period keys of the current event's shape that take it (see below).
local tk
local i = 0
while i < ne do
  local ev = take(math.min(per_take, ne - i) * stride)
  for a = 0, #ev - stride, stride do
    i = i + 1
    local f, off, m, num, sh = ev[a + 1], ev[a + 2], ev[a + 3], ev[a + 4], ev[a + 5]
    local sc, nw = shape_cur[sh], shape_len[sh]
    local last = last_off[f]
    if last == nil then
      last = recorded[f]
      last_off[f], first_off[f] = last, last
    end
    local code = 1
    if off <= last then
      local r = call('GET', refused_prefix .. fields[f] .. ':' .. fmt(off))
      if r then code = tonumber(r) else code = 3 end
    else
      last_off[f] = off
      local id = ids[i]
      if marked[i] or marks_in[id] then
        code = 2
      else
        -- The shape's period keys that take the event: sc[w] is false for a
        -- sealed one, and with max_attempts (tk) so is one where the member
        -- has used its attempts. Only sealing can close every period, and
        -- only max_attempts can exhaust them.
        local any_open, any_take = not seal_on, true
        if seal_on or attempts_on then
          any_open, any_take = false, false
          tk = {}
          local shape = shapes[sh]
          for w = 1, nw do
            local c = sc[w]
            local close = seal_on and closes[shape[w]]
            if c and close and ev[a + rts_at] >= close then c = false end
            if c then
              any_open = true
              if attempts_on and att[shape[w]][m] >= att_limit then c = false end
              if c then any_take = true end
            end
            tk[w] = c
          end
        else
          tk = sc
        end
        -- Only a sum can leave the allowed range. totals[w]: the sum's new
        -- total in the shape's period key w, which the write below uses.
        if is_sum then
          for w = 1, nw do
            local c = tk[w]
            if c then
              local old = c[m]
              local total = num
              if old then total = (unit and old or floor(old / shift)) + num end
              if total > maxv or total < -maxv then code = 4 end
              totals[w] = total
            end
          end
        end
        if code == 1 and not any_open then
          code = 6
        elseif code == 1 and not any_take then
          code = 7
        end
        if code == 1 and rate_events > 0 and not admit(members[m], ev[a + ts_at], fields[f] .. ':' .. fmt(off)) then
          code = 5
        end
      end
      if code == 1 then
        marks_in[id] = true
        markers.add(i)
        local tie = 0
        if with_tie then tie = ev[a + 6] end
        local meta = meta_on and ev[a + meta_at]
        for w = 1, nw do
          local c = tk[w]
          -- A sealed period (or one whose attempts are used) is skipped: the
          -- event still counts on the board's other periods.
          if c then
            if attempts_on then
              local j = shapes[sh][w]
              att[j][m] = att[j][m] + 1
              att_moved[j][m] = true
            end
            if is_sum then
              c[m] = totals[w] * shift + tie
              if meta then metas[shapes[sh][w]][m] = meta end
            elseif latest then
              local j = shapes[sh][w]
              local ts = ev[a + ts_at]
              local seen = times[j][m]
              if not seen or ts > seen then
                times[j][m] = ts
                c[m] = num
                moved[j][m] = true
                if meta then metas[j][m] = meta end
              end
            else
              local old = c[m]
              if not old or (op == 'gt' and num > old) or (op == 'lt' and num < old) then
                c[m] = num
                if meta then metas[shapes[sh][w]][m] = meta end
              end
            end
          end
        end
      elseif code >= 4 then
        call('SET', refused_prefix .. fields[f] .. ':' .. fmt(off), code, 'EX', ttl)
      end
    end
    if code ~= 1 then
      out[nout + 1], out[nout + 2] = i, code
      nout = nout + 2
    end
  end
end

-- Phase 3: the writes.
local moved_offsets = {}
for f, first in pairs(first_off) do
  if last_off[f] ~= first then
    moved_offsets[#moved_offsets + 1] = fields[f]
    moved_offsets[#moved_offsets + 1] = fmt(last_off[f])
  end
end
if #moved_offsets > 0 then variadic('HSET', offsets_key, moved_offsets, 2) end
markers.flush()

-- Net change of the member count of each value of period key j, by the
-- value's decimal name.
local function count(delta, v, d)
  delta[v] = (delta[v] or 0) + d
end

-- The decimal name of the value of a stored score (str: the score as a
-- decimal string, when one is at hand).
local function value_name(stored, str)
  if shift == 1 and str then return str end
  return dec(floor(stored / shift))
end

-- The one field of a value-count hash that is not a value (see settle).
local PIN_FIELD = 'encoding'
local PIN_VALUE = 'a hash table: this value is longer than hash-max-listpack-value (64 bytes)'

-- Member counts as strings, made once per call.
local small = {}
for n = 1, 16 do small[n] = fmt(n) end

-- Makes period key j's dense index and value counts exact again: one HMGET
-- of the counts and one ZMSCORE of the index for the values that changed
-- (a value in the index without a count is held once), then variadic writes.
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
    -- Values without a count: held once if in the index, else by none.
    local bare, nb = {}, 0
    for x = s, e do
      if not olds[x - s + 1] then
        nb = nb + 1
        bare[nb] = vals[x]
      end
    end
    local held = {}
    if nb > 0 then
      local in_index = call('ZMSCORE', index, unpack(bare))
      for y = 1, nb do held[bare[y]] = in_index[y] end
    end
    for x = s, e do
      local v = vals[x]
      local field = tonumber(olds[x - s + 1])
      local old = field or (held[v] and 1 or 0)
      local new = old + delta[v]
      if new > 1 then
        set[ns + 1], set[ns + 2] = v, small[new] or fmt(new)
        ns = ns + 2
      elseif field then
        nd = nd + 1
        del[nd] = v
      end
      if new > 0 and old <= 0 then
        add[na + 1], add[na + 2] = v, v
        na = na + 2
      elseif new <= 0 and old > 0 then
        nr = nr + 1
        rem[nr] = v
      end
    end
  end
  if #set > 0 then variadic('HSET', counts, set, 2) end
  if #del > 0 then variadic('HDEL', counts, del, 1) end
  if #add > 0 then variadic('ZADD', index, add, 2) end
  if #rem > 0 then variadic('ZREM', index, rem, 1) end
end


-- Writes period key j, whose values as the events left them are c: the
-- members whose value (or "latest" time) moved, then top-K trimming, the
-- dense index and the expiry. A key nothing moved in is left alone: it
-- exists, registered and with its expiry, since its members were written.
local registered = {}
local function write_key(j, c)
  local k = KEYS[1 + j]
  local delta = {}
  local pairs_, np_ = {}, 0
  -- hidden members' values, for the shadow key
  local shadowed = {}
  local stamps = {}
  local b, bs = base[j], base_str[j]
  local list = lists[j]
  for x = 1, list_len[j] do
    local m = x
    if list then m = list[x] end
    local old, new = b[m], c[m]
    if old ~= new and any_hidden and hidden[m] then
      shadowed[#shadowed + 1] = dec(new)
      shadowed[#shadowed + 1] = members[m]
    elseif old ~= new then
      -- dec(new), inline: this runs for every member written.
      local new_str = decimal[new]
      if not new_str then
        new_str = format('%d', new)
        decimal[new] = new_str
      end
      np_ = np_ + 2
      pairs_[np_ - 1] = new_str
      pairs_[np_] = members[m]
      if dense_on then
        -- The values' decimal names (see value_name), inline for SHIFT 1:
        -- this runs for every member written.
        local name
        if old then
          name = unit and bs[m] or value_name(old)
          delta[name] = (delta[name] or 0) - 1
        end
        name = unit and new_str or value_name(new)
        delta[name] = (delta[name] or 0) + 1
      end
    end
    if latest and moved[j][m] then
      stamps[#stamps + 1] = members[m]
      stamps[#stamps + 1] = fmt(times[j][m])
    end
  end
  if np_ == 0 and #shadowed == 0 and #stamps == 0 and not (meta_on and next(metas[j]))
    and not (attempts_on and next(att_moved[j])) then
    return
  end
  -- The registry lets an erasure find every period key of the tag (one SADD
  -- for the call's keys, after the last).
  registered[#registered + 1] = k
  if np_ > 0 then variadic('ZADD', k, pairs_, 2) end
  local shadow = KEYS[1 + 3 * np + j]
  if #shadowed > 0 then variadic('ZADD', shadow, shadowed, 2) end
  if #stamps > 0 then variadic('HSET', KEYS[times_keys + j], stamps, 2) end
  local ak = KEYS[att_keys + j]
  if attempts_on then
    local counts = {}
    for m in pairs(att_moved[j]) do
      counts[#counts + 1] = members[m]
      counts[#counts + 1] = fmt(att[j][m])
    end
    if #counts > 0 then variadic('HSET', ak, counts, 2) end
  end
  local mk = KEYS[meta_keys + j]
  if meta_on then
    -- Each decided member's meta; a member that had a value before may
    -- hold the meta of an earlier event, which an event without one clears.
    local set, del = {}, {}
    for m, meta in pairs(metas[j]) do
      if meta ~= '' then
        set[#set + 1] = members[m]
        set[#set + 1] = meta
      elseif b[m] then
        del[#del + 1] = members[m]
      end
    end
    if #set > 0 then variadic('HSET', mk, set, 2) end
    if #del > 0 then variadic('HDEL', mk, del, 1) end
  end
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
      if meta_on then
        local gone = {}
        for v = 1, #victims, 2 do gone[#gone + 1] = victims[v] end
        variadic('HDEL', mk, gone, 1)
      end
    end
  end
  if dense_on then settle(j, delta) end
  local at = ARGV[17 + j]
  if at ~= '0' then
    call('EXPIREAT', k, at)
    if dense_on then
      call('EXPIREAT', KEYS[1 + np + j], at)
      call('EXPIREAT', KEYS[1 + 2 * np + j], at)
    end
    if latest then call('EXPIREAT', KEYS[times_keys + j], at) end
    if meta_on then call('EXPIREAT', mk, at) end
    if #shadowed > 0 then call('EXPIREAT', shadow, at) end
    if attempts_on then call('EXPIREAT', ak, at) end
  end
end

-- cur[j] exists for each period key phase 1 read: open, and written by
-- some event of the batch.
for j = 1, np do
  if cur[j] then write_key(j, cur[j]) end
end
if #registered > 0 then variadic('SADD', registry, registered, 1) end
return out
