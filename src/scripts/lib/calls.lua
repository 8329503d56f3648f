-- calls.lua: commands over long lists, in chunks (Lua's unpack has a
-- stack limit of a few thousand values).

local Calls = {}
do
  local call, min, unpack = redis.call, math.min, unpack
  -- List items per command, at most.
  Calls.CHUNK = 1000
  local CHUNK = Calls.CHUNK

  -- Runs the variadic command cmd on key over list (already flat), CHUNK
  -- items of step arguments at a time.
  function Calls.variadic(cmd, key, list, step)
    local n = #list
    for c = 1, n, CHUNK * step do
      call(cmd, key, unpack(list, c, min(c + CHUNK * step - 1, n)))
    end
  end
end
