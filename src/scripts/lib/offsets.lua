-- offsets.lua: a board tag's recorded offsets, which make a redelivered
-- record change nothing, and the refusals remembered per record.
--
-- The tag's offsets hash maps "<topic>:<partition>" to the last offset
-- applied on the tag. A record at or below it is a redelivery: it answers
-- the refusal remembered for it (a record refused is remembered under
-- "<refused prefix><field>:<offset>", EX dedupe ttl, so that its redelivery
-- reports the same refusal, not a duplicate), else REDELIVERED.
--
-- Preconditions: the worker sends a call while the one before it on the
-- tag is still on its way, so that Redis never waits for the client. If
-- that earlier call has not been applied (it failed), this one must not run
-- ahead of it: its offsets would make the earlier call's events look
-- redelivered when it is retried. So each field's offset must already be
-- recorded up to the last one the earlier call carries (-1: no condition);
-- if not, the call does nothing and answers STALE, and the worker sends it
-- again once the earlier one has landed.

local Offsets = {}
do
  local call, min, tonumber, format = redis.call, math.min, tonumber, string.format
  local CHUNK = Calls.CHUNK

  -- The offsets of fields (a list) on the tag whose offsets hash is key,
  -- read with one HMGET per CHUNK fields: o.recorded[f] is field f's
  -- recorded offset, -1 for none.
  function Offsets.open(key, fields, refused_prefix, ttl)
    local recorded, nf = {}, #fields
    for s = 1, nf, CHUNK do
      local e = min(s + CHUNK - 1, nf)
      local got = call('HMGET', key, unpack(fields, s, e))
      for f = s, e do recorded[f] = tonumber(got[f - s + 1]) or -1 end
    end
    local o = { recorded = recorded }

    -- The error STALE when a precondition (needs[f], per field) does not hold.
    function o.stale(needs)
      for f = 1, nf do
        if needs[f] >= 0 and recorded[f] < needs[f] then
          return redis.error_reply(Const.STALE .. ' the call before this one on ' .. key .. ' has not been applied')
        end
      end
      return nil
    end

    local function refusal_key(f, off)
      return refused_prefix .. fields[f] .. ':' .. format('%d', off)
    end

    -- What a redelivered record of field f at offset off answers: the
    -- refusal remembered for it (and the value that broke an integrity
    -- rule), else REDELIVERED.
    function o.redelivered(f, off)
      local got = call('GET', refusal_key(f, off))
      if not got then return Codes.REDELIVERED end
      local code, observed = string.match(got, '^(%d+):?(-?%d*)$')
      return tonumber(code) or Codes.REDELIVERED, tonumber(observed)
    end

    -- Remembers that the record of field f at offset off was refused (or
    -- held) with code, and the value that broke the rule, if one did.
    function o.refuse(f, off, code, observed)
      local v = format('%d', code)
      if observed then v = v .. ':' .. format('%d', observed) end
      call('SET', refusal_key(f, off), v, 'EX', ttl)
    end

    -- Records last[f], for each field f that moved from its recorded offset.
    function o.record(last)
      local moved = {}
      for f, off in pairs(last) do
        if off ~= recorded[f] then
          moved[#moved + 1] = fields[f]
          moved[#moved + 1] = format('%d', off)
        end
      end
      Calls.variadic('HSET', key, moved, 2)
    end

    return o
  end
end
