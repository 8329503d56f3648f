-- markers.lua: a board tag's dedupe markers, used by apply.lua and
-- admin.lua (it defines Markers and runs nothing).
--
-- A marker is the first BYTES (Const.MARKER_BYTES, 12) bytes of an event id's 16 through a
-- bijection the worker applies (src/markers.rs), so its first four bytes
-- are uniform. The markers set while Redis's clock was in the nth
-- dedupe_ttl are in the hash "<prefix>:{tag}:_seen:<n>", n = floor(TIME /
-- ttl), in buckets:
--   field "<b>" (decimal)    the concatenated markers of bucket b
--   fields level, split     how the buckets have grown (absent: 0 and 0)
--   field count             how many markers the hash holds
-- Linear hashing: a marker whose first four bytes read as h (big endian) is
-- in bucket h mod 2^level, or h mod 2^(level+1) when that is below split.
-- Whenever count passes LOAD per bucket, bucket split is split into split
-- and split + 2^level, and split moves on (at 2^level: level + 1, split 0).
-- A new hash starts at the level the one before it needed, so a tag with
-- steady traffic splits buckets only in its first dedupe_ttl.
-- A bucket is one value of about LOAD x BYTES bytes: a marker costs Redis its
-- BYTES bytes and a share of one field, where a field per marker cost about 83
-- bytes; and a call still reads and writes all its markers with one HMGET
-- per hash and one HSET.
--
-- A marker is looked up in hash n and hash n - 1 and set in hash n, so an
-- event id is known for at least ttl after it was set, and at most 2 ttl.
-- A hash after the current one exists only if Redis's clock went back (a
-- failover to a node whose clock is behind): it is then the current one, so
-- that no marker is missed. Hash n expires half a ttl after hash n + 1 has
-- ended; the first call in hash n + 2 unlinks it before that (UNLINK frees
-- a large hash off Redis's main thread).
--
-- Use: local mk = Markers.open(prefix, ttl); mk.seen(markers) -> booleans
-- (once); mk.add(i) for the ith of those to set; mk.flush() writes them.

local Markers = {}
do
  local LOAD, BYTES = Const.MARKER_LOAD, Const.MARKER_BYTES
  local call, floor, format, byte, find, sub, concat = redis.call, math.floor, string.format, string.byte, string.find, string.sub, table.concat
  local unpack, min, tonumber = unpack, math.min, tonumber
  local CHUNK = Calls.CHUNK

  local function num(n)
    return format('%d', n)
  end

  -- A hash's growth and the bucket values read so far.
  local function open_hash(key)
    local v = call('HMGET', key, 'level', 'split', 'count')
    local level = tonumber(v[1]) or 0
    return {
      key = key,
      exists = v[1] ~= false or v[3] ~= false,
      level = level,
      size = 2 ^ level,
      split = tonumber(v[2]) or 0,
      count = tonumber(v[3]) or 0,
      -- blobs[b]: bucket b's value ('' for none), once read
      blobs = {},
    }
  end

  local function hash_of(s, at)
    local a, b, c, d = byte(s, at, at + 3)
    return ((a * 256 + b) * 256 + c) * 256 + d
  end

  local function bucket(h, size, split)
    local b = h % size
    if b < split then b = h % (2 * size) end
    return b
  end

  -- Whether blob holds marker m at a marker's boundary.
  local function holds(blob, m)
    local p = find(blob, m, 1, true)
    while p do
      if p % BYTES == 1 then return true end
      p = find(blob, m, p + 1, true)
    end
    return false
  end

  -- Field names of buckets, made once per call.
  local names = {}
  local function name(b)
    local s = names[b]
    if not s then
      s = num(b)
      names[b] = s
    end
    return s
  end

  -- Reads the values of buckets bs (a list) of hash st into st.blobs.
  local function fetch(st, bs)
    local n = #bs
    if not st.exists then
      for x = 1, n do st.blobs[bs[x]] = '' end
      return
    end
    for s = 1, n, CHUNK do
      local e = min(s + CHUNK - 1, n)
      local list = {}
      for x = s, e do list[x - s + 1] = name(bs[x]) end
      local got = call('HMGET', st.key, unpack(list))
      for x = s, e do st.blobs[bs[x]] = got[x - s + 1] or '' end
    end
  end

  -- The buckets in hash st of the markers whose hashes are hs, reading
  -- those not read yet. (Inlined and counted by hand: this runs for every
  -- marker, and a function call or a '#' costs as much as the rest.)
  local function buckets_of(st, hs)
    local out, want, wanted, nw = {}, {}, {}, 0
    local size, split, blobs = st.size, st.split, st.blobs
    local twice = 2 * size
    for i = 1, #hs do
      local h = hs[i]
      local b = h % size
      if b < split then b = h % twice end
      out[i] = b
      if blobs[b] == nil and not wanted[b] then
        wanted[b] = true
        nw = nw + 1
        want[nw] = b
      end
    end
    fetch(st, want)
    return out
  end

  -- The hash of each marker's first four bytes (big endian).
  local function hashes(ms)
    local hs = {}
    for i = 1, #ms do
      local a, b, c, d = byte(ms[i], 1, 4)
      hs[i] = ((a * 256 + b) * 256 + c) * 256 + d
    end
    return hs
  end

  -- seen[i]: marker ms[i] (whose hash is hs[i]) is in hash now or hash
  -- before; and bs, each marker's bucket in now (reading the buckets' values
  -- into each hash's blobs).
  local function lookup(now, before, ms, hs)
    local seen, now_bs = {}, nil
    for _, st in ipairs({ now, before }) do
      if st.exists or st == now then
        local bs = buckets_of(st, hs)
        if st == now then now_bs = bs end
        local blobs = st.blobs
        for i = 1, #ms do
          if not seen[i] then
            local blob = blobs[bs[i]]
            if blob == '' then
              seen[i] = false
            else
              seen[i] = holds(blob, ms[i])
            end
          end
        end
      end
    end
    return seen, now_bs
  end

  -- Appends the markers added (ms[i] for i in pending[1..added], in bucket
  -- bs[i]) to their buckets' values in st.blobs. Returns the buckets
  -- changed in order (dirty, ndirty) and touched (b -> a value for each).
  local function append(st, ms, bs, pending, added)
    local blobs = st.blobs
    -- The markers added per bucket: one string, or a list of them (a
    -- bucket rarely takes two in a call once there are many).
    local parts, dirty, ndirty = {}, {}, 0
    for x = 1, added do
      local i = pending[x]
      local b, m = bs[i], ms[i]
      local p = parts[b]
      if p == nil then
        parts[b] = m
        ndirty = ndirty + 1
        dirty[ndirty] = b
      elseif type(p) == 'string' then
        parts[b] = { p, m }
      else
        p[#p + 1] = m
      end
    end
    for _, b in ipairs(dirty) do
      local p = parts[b]
      if type(p) == 'table' then p = concat(p) end
      blobs[b] = blobs[b] .. p
    end
    return dirty, ndirty, parts
  end

  -- The growth st needs to hold count markers: a split per LOAD markers
  -- past LOAD per bucket, bucket split first. Returns the new level, size
  -- and split, and the buckets that existed and are split now (sources),
  -- each once.
  local function grow(st, count)
    local size, split, level = st.size, st.split, st.level
    local existing = size + split
    local sources, is_source = {}, {}
    while count > LOAD * (size + split) do
      if split < existing and not is_source[split] then
        is_source[split] = true
        sources[#sources + 1] = split
      end
      split = split + 1
      if split == size then
        split, size, level = 0, size * 2, level + 1
      end
    end
    return level, size, split, sources
  end

  -- Moves each source's markers straight to their bucket under the growth
  -- (size, split): the source itself or buckets split off it, which are new
  -- (so a marker moves once, however many splits). The buckets that change
  -- join dirty (unless touched already); returns the new ndirty.
  local function redistribute(st, sources, size, split, touched, dirty, ndirty)
    local blobs = st.blobs
    local unread = {}
    for _, b in ipairs(sources) do
      if blobs[b] == nil then unread[#unread + 1] = b end
    end
    fetch(st, unread)
    local out, outs = {}, {}
    for _, b in ipairs(sources) do
      local blob = blobs[b]
      out[b] = {}
      outs[#outs + 1] = b
      for p = 1, #blob, BYTES do
        local to = bucket(hash_of(blob, p), size, split)
        local list = out[to]
        if not list then
          list = {}
          out[to] = list
          outs[#outs + 1] = to
        end
        list[#list + 1] = sub(blob, p, p + BYTES - 1)
      end
    end
    for _, b in ipairs(outs) do
      blobs[b] = concat(out[b])
      if not touched[b] then
        touched[b] = true
        ndirty = ndirty + 1
        dirty[ndirty] = b
      end
    end
    return ndirty
  end

  -- Writes st's growth (level, split), its count and its dirty buckets, in
  -- commands of at most CHUNK fields.
  local function write(st, level, split, count, dirty, ndirty)
    local args, na = { 'level', num(level), 'split', num(split), 'count', num(count) }, 6
    for x = 1, ndirty do
      local b = dirty[x]
      args[na + 1], args[na + 2] = name(b), st.blobs[b]
      na = na + 2
    end
    for s = 1, na, 2 * CHUNK do
      call('HSET', st.key, unpack(args, s, min(s + 2 * CHUNK - 1, na)))
    end
  end

  function Markers.open(prefix, ttl)
    local n = floor(tonumber(call('TIME')[1]) / ttl)
    if call('EXISTS', prefix .. num(n + 1)) == 1 then n = n + 1 end
    local now, before = open_hash(prefix .. num(n)), open_hash(prefix .. num(n - 1))
    -- A new hash starts with the smallest power of two of buckets that
    -- holds the markers of the one before at LOAD a bucket, so that a tag
    -- whose traffic is steady never splits a bucket after its first
    -- dedupe_ttl.
    if not now.exists and before.exists then
      while LOAD * now.size < before.count do
        now.level, now.size = now.level + 1, now.size * 2
      end
    end
    -- The markers looked up (ms) and their buckets in hash n (now_bs);
    -- pending: the indexes of those to set.
    local ms, now_bs, pending, npending = {}, {}, {}, 0
    local mk = {}

    -- seen(list)[i]: marker list[i] is in hash n or hash n - 1. Called once.
    function mk.seen(list)
      ms = list
      local seen
      seen, now_bs = lookup(now, before, ms, hashes(ms))
      return seen
    end

    -- Sets the ith marker seen() looked up (written by flush).
    function mk.add(i)
      npending = npending + 1
      pending[npending] = i
    end

    -- Writes the markers added, splitting buckets as the count requires,
    -- gives hash n its expiry and unlinks hash n - 2.
    function mk.flush()
      if npending > 0 then
        local dirty, ndirty, touched = append(now, ms, now_bs, pending, npending)
        local count = now.count + npending
        local level, size, split, sources = grow(now, count)
        if #sources > 0 then
          ndirty = redistribute(now, sources, size, split, touched, dirty, ndirty)
        end
        write(now, level, split, count, dirty, ndirty)
        if not now.exists then call('EXPIREAT', now.key, num((n + 2) * ttl + floor(ttl / 2))) end
      end
      -- The call that makes hash n gives it its expiry and unlinks hash n - 2;
      -- later calls in hash n find both done.
      if not now.exists then call('UNLINK', prefix .. num(n - 2)) end
    end

    return mk
  end
end
