-- registered.lua: the lost-data check of every script that writes to a
-- board tag (apply, admin, seal, roll, settle, history, history_put).
--
-- Every tag is registered before its first write: the field
-- Const.REGISTERED_FIELD ("registered", keys::REGISTERED_FIELD) of its
-- offsets hash, set by store/conn/registry.rs.
-- A tag without it was never registered, which a worker never writes, or
-- has lost its data since: Redis restarted without persistence, was
-- flushed, or failed over to a replica that never had it. Writing to it
-- would start boards that look valid and miss every score before, so a
-- script calls this first and, on an answer, returns it having written
-- nothing:
--
--   local lost = Registered.check(offsets_key); if lost then return lost end

local Registered = {}

-- The error LOST when the tag whose offsets hash is `offsets_key` is not
-- registered; nil when it is.
function Registered.check(offsets_key)
  if redis.call('HEXISTS', offsets_key, Const.REGISTERED_FIELD) == 0 then
    return redis.error_reply(Const.LOST .. ' board tag ' .. offsets_key .. ' is not registered: its data is gone')
  end
  return nil
end
