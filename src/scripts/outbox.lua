-- outbox.lua: the records scheduled jobs publish (sealed tops, league
-- results) with kafka.transactions, kept in Redis in the order they were
-- decided until the outbox's publisher has committed them in a Kafka
-- transaction; all under one hash tag ("<prefix>:{.outbox}"), so each call
-- is atomic.
--
-- keys: seq items lease epoch
-- derives: ids
--   (one key per output id appended, "<ids prefix><id>", EX ttl: an id
--   appended again within ttl is not appended twice)
-- KEYS[1] seq: the last sequence number given (INCR)
-- KEYS[2] items: hash, sequence number -> the record (text the caller encodes)
-- KEYS[3] lease: the publisher's name, PX its lease
-- KEYS[4] epoch: this outbox's name, made once; the publisher's committed
--         position carries it, so that a new outbox (an emptied Redis, a new
--         key prefix) is not taken for one already published
--
-- ARGV[1] = "append", ARGV[2] ids prefix, ARGV[3] ttl seconds, then pairs
--           id, record: each record whose id was not appended within ttl
--           gets the next sequence number. Returns how many were appended.
-- ARGV[1] = "read", ARGV[2] first, ARGV[3] most: the records from sequence
--           number `first` on, in order, up to `most`: seq, record, seq, ...
-- ARGV[1] = "trim", ARGV[2] first, ARGV[3] end: deletes the records from
--           `first` to before `end` (published). Returns how many.
-- ARGV[1] = "lease", ARGV[2] name, ARGV[3] ms: takes or renews the lease
--           if it is free or `name`'s. Returns 1 if `name` holds it now.
-- ARGV[1] = "epoch", ARGV[2] a new name: the outbox's name (set to the new
--           one if it had none).

local call = redis.call
local op = ARGV[1]

if op == 'append' then
  local ids, ttl = ARGV[2], ARGV[3]
  local appended = 0
  for a = 4, #ARGV, 2 do
    local id_key = ids .. ARGV[a]
    if call('EXISTS', id_key) == 0 then
      local seq = call('INCR', KEYS[1])
      call('HSET', KEYS[2], seq, ARGV[a + 1])
      call('SET', id_key, seq, 'EX', ttl)
      appended = appended + 1
    end
  end
  return appended
elseif op == 'read' then
  local first, most = tonumber(ARGV[2]), tonumber(ARGV[3])
  local last = tonumber(call('GET', KEYS[1]) or '0')
  local out = {}
  if last < first then return out end
  local fields = {}
  for s = first, math.min(last, first + most - 1) do fields[#fields + 1] = s end
  local got = call('HMGET', KEYS[2], unpack(fields))
  for i = 1, #fields do
    if got[i] then
      out[#out + 1] = fields[i]
      out[#out + 1] = got[i]
    end
  end
  return out
elseif op == 'trim' then
  local first, stop = tonumber(ARGV[2]), tonumber(ARGV[3])
  local n = 0
  for s = first, stop - 1 do n = n + call('HDEL', KEYS[2], s) end
  return n
elseif op == 'lease' then
  local holder = call('GET', KEYS[3])
  if holder and holder ~= ARGV[2] then return 0 end
  call('SET', KEYS[3], ARGV[2], 'PX', ARGV[3])
  return 1
elseif op == 'epoch' then
  call('SET', KEYS[4], ARGV[2], 'NX')
  return call('GET', KEYS[4])
end
return redis.error_reply('outbox.lua: unknown op ' .. tostring(op))
