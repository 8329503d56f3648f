-- expiry.lua: keys that expire together.
--
-- A period key's dense index, value counts, event times, metadata, attempts
-- and shadow expire with it: at its period's end plus the board's retention
-- (EXPIREAT seconds, computed by the worker; 0 or "0" for never).

local Expiry = {}
do
  local call = redis.call

  -- Sets each key of the list keys to expire at `at` (seconds), unless `at`
  -- is 0. With only_existing, a missing key is left alone (EXPIREAT on a
  -- missing key does nothing anyway; this saves the command).
  function Expiry.at(at, keys, only_existing)
    if at == 0 or at == '0' then return end
    for _, k in ipairs(keys) do
      if not only_existing or call('EXISTS', k) == 1 then call('EXPIREAT', k, at) end
    end
  end

  -- Gives key `to` the expiry of key `from`, if `from` has one.
  function Expiry.copy(from, to)
    local at = call('PEXPIRETIME', from)
    if at > 0 then call('PEXPIREAT', to, at) end
  end
end
