-- roll.lua: one bounded step of recomputing one rolling board of ONE board
-- tag from its daily keys. Each call does at most the header's budget of members' work, so
-- no call holds Redis for long whatever the board's size; the new union is
-- built in staging keys and swapped in by the last step with RENAME, so
-- readers see the old union or the new one, never a mix.
--
-- keys by name: dest dest_dense registry state staged staged_dense key copy meta copy_meta dest_meta staged_meta offsets versions
-- derives: (none)
-- ARGV[1]  the header, a MessagePack map (built by src/store/jobs/seal_roll.rs):
--   dest, dest_dense, registry, state   KEYS indexes: the rolling key, its
--            dense index, the tag's registry, the build's state
--   staged, staged_dense                 the staged union and its dense index
--   days     per day d (1 is the newest, today): {key, copy} (the daily key
--            and its staged copy), and on boards that keep metadata
--            {meta, copy_meta} (their meta hashes)
--   dest_meta, staged_meta               boards that keep metadata: the meta
--            hashes of the rolling key and the staged union
--   offsets  the tag's offsets hash (its "registered" field: registered.lua)
--   agg      SUM | MAX | MIN      shift  SHIFT (packing)    dense  keep the dense index
--   expire_at EXPIREAT seconds    top_k  0: none            desc   "desc" board
--   meta     the board keeps metadata   budget  the most members one call reads or writes
--   versions KEYS index of the rolling key's version hash (its `swaps` counter rises with every swap)
--
-- Metadata follows the value it explains: a day's copy takes each member's
-- meta in the same step as its score; merging, a SUM keeps the meta of the
-- newest day the member is on (its last event), a MAX or MIN the meta of
-- the day whose value wins, the older day on equal values (its event came
-- first), as on the daily boards themselves.
--
-- The build goes through phases, recorded in the state hash with where it is:
--   copy   ZSCAN each day into its copy (ZADD: a member ZSCAN returns twice,
--          or whose score moved meanwhile, is set again, never counted twice);
--   merge  the first copy becomes the union (RENAME), the others are merged
--          into it by rank (copies no longer change): ZINCRBY for SUM,
--          ZADD GT for MAX, ZADD LT for MIN;
--   trim   top-K boards drop all but their best K;
--   dense  the dense index of the union, by rank;
--   then the swap.
-- A build whose window moved (a new day, or another number of days) starts
-- again. Every staged key is in the tag's registry while it exists, so an
-- erasure during a build reaches it. A SUM is exact while every partial sum
-- stays within 2^53 - 1 (see score.rs): a member's running sum past it ends
-- the build with the old union untouched.
--
-- Returns the error LOST, having done nothing, when the tag is not
-- registered (its data is gone); otherwise {"more", members done} while work remains, {"done", size of the
-- union} once swapped in (0: the union is empty and the rolling key deleted),
-- or {"inexact", 0}.

local h = cmsgpack.unpack(ARGV[1])
local agg, shift, dense_on = h.agg, h.shift, h.dense
local expire_at, top_k, desc = Value.fmt(h.expire_at), h.top_k, h.desc
local meta_on, budget = h.meta, h.budget
local dest, dense, registry, state = KEYS[h.dest], KEYS[h.dest_dense], KEYS[h.registry], KEYS[h.state]
local staged, staged_dense = KEYS[h.staged], KEYS[h.staged_dense]
-- A tag that lost its data gets no rolling board: it would be built from
-- daily keys that miss every score before the loss.
local lost = Registered.check(KEYS[h.offsets])
if lost then return lost end
local days = #h.days
local MAX_EXACT = Const.MAX_EXACT
local day = function(d) return KEYS[h.days[d].key] end
local copy = function(d) return KEYS[h.days[d].copy] end
local dest_meta, staged_meta = h.dest_meta and KEYS[h.dest_meta], h.staged_meta and KEYS[h.staged_meta]
local day_meta = function(d) return KEYS[h.days[d].meta] end
local copy_meta = function(d) return KEYS[h.days[d].copy_meta] end
local window = day(1) .. '|' .. days

local function drop_staged()
  redis.call('UNLINK', staged, staged_dense)
  redis.call('SREM', registry, staged)
  if meta_on then redis.call('UNLINK', staged_meta) end
  for d = 1, days do
    redis.call('UNLINK', copy(d))
    redis.call('SREM', registry, copy(d))
    if meta_on then redis.call('UNLINK', copy_meta(d)) end
  end
end

-- Sets the metas of members[i] in hash to metas[i] (false: none), in chunks.
local function put_metas(hash, members, metas)
  local set, del = {}, {}
  for i = 1, #members do
    if metas[i] then
      set[#set + 1] = members[i]
      set[#set + 1] = metas[i]
    else
      del[#del + 1] = members[i]
    end
  end
  Calls.variadic('HSET', hash, set, 2)
  Calls.variadic('HDEL', hash, del, 1)
  if #set > 0 then redis.call('EXPIREAT', hash, expire_at) end
end

-- The metas of the members named at the odd places of items, from hash.
local function metas_of(hash, items)
  local names, out = {}, {}
  for i = 1, #items, 2 do names[#names + 1] = items[i] end
  for i = 1, #names, 1000 do
    local got = redis.call('HMGET', hash, unpack(names, i, math.min(i + 999, #names)))
    for j = 1, #got do out[i - 1 + j] = got[j] end
  end
  return names, out
end

-- A staged zset just written: registered (an erasure removes a missing key
-- from the registry, so each write registers again) and expiring.
local function touched(key)
  redis.call('SADD', registry, key)
  redis.call('EXPIREAT', key, expire_at)
end

local function zadd_pairs(key, flags, items)
  for i = 1, #items, 1000 do
    local args = {key}
    for _, f in ipairs(flags) do args[#args + 1] = f end
    for j = i, math.min(i + 999, #items), 2 do
      args[#args + 1] = items[j + 1]
      args[#args + 1] = items[j]
    end
    redis.call('ZADD', unpack(args))
  end
end

local st = {}
local flat = redis.call('HGETALL', state)
for i = 1, #flat, 2 do st[flat[i]] = flat[i + 1] end
if st.window ~= window then
  drop_staged()
  st = {window = window, phase = 'copy', d = '1', at = '0'}
end
local phase, d, at = st.phase, tonumber(st.d), st.at
local done = 0

-- Each phase's step reads or writes at most what is left of the budget and
-- moves phase, d, at and done on.

-- copy: a budget's worth of day d's members into its copy; after the last
-- day, the first copy becomes the union.
local function copy_step()
  local r = redis.call('ZSCAN', day(d), at, 'COUNT', budget - done)
  local items = r[2]
  if #items > 0 then
    zadd_pairs(copy(d), {}, items)
    touched(copy(d))
    if meta_on then put_metas(copy_meta(d), metas_of(day_meta(d), items)) end
  end
  done = done + #items / 2 + 1
  at = r[1]
  if at == '0' then
    d = d + 1
    if d > days then
      phase, d, at = 'merge', 2, '0'
      if redis.call('EXISTS', copy(1)) == 1 then
        redis.call('RENAME', copy(1), staged)
        redis.call('SREM', registry, copy(1))
        touched(staged)
        if meta_on and redis.call('EXISTS', copy_meta(1)) == 1 then
          redis.call('RENAME', copy_meta(1), staged_meta)
        end
      end
    end
  end
end

-- merge: a budget's worth of day d's copy merged into the union by rank;
-- 'inexact' when a SUM passes MAX_EXACT.
local function merge_step()
  if d > days then
    phase, at = 'trim', '0'
  else
    local from = tonumber(at)
    local items = redis.call('ZRANGE', copy(d), from, from + budget - done - 1, 'WITHSCORES')
    if #items == 0 then
      redis.call('UNLINK', copy(d))
      redis.call('SREM', registry, copy(d))
      d, at = d + 1, '0'
    else
      -- Members whose meta this (older) day decides: for a SUM those not
      -- on a newer day, for MAX and MIN those whose value here wins or ties.
      local takes = {}
      if meta_on then
        local names = {}
        for i = 1, #items, 2 do names[#names + 1] = items[i] end
        local cur = redis.call('ZMSCORE', staged, unpack(names))
        for i = 1, #names do
          local old, new = cur[i] and tonumber(cur[i]), tonumber(items[2 * i])
          takes[i] = not old or (agg == 'MAX' and new >= old) or (agg == 'MIN' and new <= old)
        end
      end
      if agg == 'SUM' then
        for i = 1, #items, 2 do
          local sum = tonumber(redis.call('ZINCRBY', staged, items[i + 1], items[i]))
          if math.abs(sum) > MAX_EXACT then return 'inexact' end
        end
      else
        zadd_pairs(staged, {agg == 'MAX' and 'GT' or 'LT'}, items)
      end
      if meta_on then
        local names, metas = metas_of(copy_meta(d), items)
        local who, what = {}, {}
        for i = 1, #names do
          if takes[i] then
            who[#who + 1] = names[i]
            what[#who] = metas[i]
          end
        end
        put_metas(staged_meta, who, what)
      end
      touched(staged)
      at = Value.fmt(from + #items / 2)
    end
    done = done + #items / 2 + 1
  end
end

-- trim: top-K (topk.lua), a budget's worth of members at a time.
local function trim_step()
  local gone = TopK.trim(staged, top_k, desc, budget - done)
  if #gone == 0 then
    phase, at = dense_on and 'dense' or 'swap', '0'
  else
    if meta_on then
      local names = {}
      for i = 1, #gone, 2 do names[#names + 1] = gone[i] end
      Calls.variadic('HDEL', staged_meta, names, 1)
    end
    done = done + #gone / 2
  end
end

-- dense: a budget's worth of the union's dense index, by rank.
local function dense_step()
  local from = tonumber(at)
  local items = redis.call('ZRANGE', staged, from, from + budget - done - 1, 'WITHSCORES')
  if #items == 0 then
    phase = 'swap'
  else
    -- A rolling board's index has no counts (dense.lua): it is built once, here.
    local names = {}
    for i = 2, #items, 2 do names[#names + 1] = Value.fmt(Value.of(items[i], shift)) end
    Dense.add_uncounted(staged_dense, names)
    redis.call('EXPIREAT', staged_dense, expire_at)
    at = Value.fmt(from + #items / 2)
  end
  done = done + #items / 2 + 1
end

local steps = { copy = copy_step, merge = merge_step, trim = trim_step, dense = dense_step }
while done < budget and phase ~= 'swap' do
  if steps[phase]() == 'inexact' then
    drop_staged()
    redis.call('DEL', state)
    return {'inexact', 0}
  end
end
if phase ~= 'swap' then
  redis.call('HSET', state, 'window', window, 'phase', phase, 'd', d, 'at', at)
  redis.call('EXPIREAT', state, expire_at)
  return {'more', done}
end

-- The swap: O(1) renames; the old union is freed off the main thread (UNLINK).
local card = redis.call('ZCARD', staged)
redis.call('UNLINK', dest, dense)
if meta_on then redis.call('UNLINK', dest_meta) end
if card > 0 then
  redis.call('RENAME', staged, dest)
  redis.call('EXPIREAT', dest, expire_at)
  redis.call('SADD', registry, dest)
  if meta_on and redis.call('EXISTS', staged_meta) == 1 then
    redis.call('RENAME', staged_meta, dest_meta)
    redis.call('EXPIREAT', dest_meta, expire_at)
  end
  if dense_on and redis.call('EXISTS', staged_dense) == 1 then
    redis.call('RENAME', staged_dense, dense)
    redis.call('EXPIREAT', dense, expire_at)
  end
end
drop_staged()
redis.call('DEL', state)
redis.call('HINCRBY', KEYS[h.versions], 'swaps', 1)
redis.call('EXPIREAT', KEYS[h.versions], expire_at)
return {'done', card}
