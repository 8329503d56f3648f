-- header.lua: the apply call's header (ARGV[1]) read strictly (it defines
-- Header and runs nothing).
--
-- The header's maps and their fields are declared once, in
-- src/store/write/header.rs, which writes HeaderFields and HeaderNested before
-- this file: per scope, HeaderFields[scope][field] is true for a value, a
-- scope's name for a map and { scope } for a list of maps; HeaderNested
-- holds only the fields that are maps or lists of maps. Header.read
-- unpacks the header and gives each of its maps a metatable under which
-- reading a field its scope does not declare raises an error naming it:
-- a phase that reads a field the worker does not write stops the call, in
-- every test that runs that phase. A declared field a call does not carry
-- reads as nil.
--
-- Use: local h = Header.read(ARGV[1])

local Header = {}
do
  local setmetatable, rawget, pairs, ipairs, type, tostring = setmetatable, rawget, pairs, ipairs, type, tostring

  local function guard(map, scope)
    local fields = HeaderFields[scope]
    setmetatable(map, {
      __index = function(_, k)
        if fields[k] == nil then
          error('apply header: a ' .. scope .. ' map declares no field ' .. tostring(k))
        end
      end,
    })
    for k, holds in pairs(HeaderNested[scope] or {}) do
      local v = rawget(map, k)
      if v ~= nil then
        if type(holds) == 'string' then
          guard(v, holds)
        else
          for _, m in ipairs(v) do guard(m, holds[1]) end
        end
      end
    end
    return map
  end

  function Header.read(blob)
    return guard(cmsgpack.unpack(blob), 'top')
  end
end
