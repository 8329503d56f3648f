-- members.lua: the order of members among equal stored scores, as Redis
-- sorts a sorted set: by their bytes, descending on "desc" boards (as
-- ZREVRANGE lists them), ascending on "asc" ones. Lua's own string
-- comparison follows Redis's locale (strcoll), so the bytes are compared
-- here, eight per call of string.byte: ties are common at the top of a
-- board, and members share long prefixes.

local Members = {}
do
  local byte, min = string.byte, math.min

  -- Whether a's bytes sort after b's.
  local function bytes_after(a, b)
    if a == b then return false end
    local la, lb = #a, #b
    local n = min(la, lb)
    for k = 1, n, 8 do
      local e = min(k + 7, n)
      local a1, a2, a3, a4, a5, a6, a7, a8 = byte(a, k, e)
      local b1, b2, b3, b4, b5, b6, b7, b8 = byte(b, k, e)
      if a1 ~= b1 then return a1 > b1 end
      if a2 ~= b2 then return a2 > b2 end
      if a3 ~= b3 then return a3 > b3 end
      if a4 ~= b4 then return a4 > b4 end
      if a5 ~= b5 then return a5 > b5 end
      if a6 ~= b6 then return a6 > b6 end
      if a7 ~= b7 then return a7 > b7 end
      if a8 ~= b8 then return a8 > b8 end
    end
    return la > lb
  end

  -- Whether member a comes before member b at an equal stored score on a
  -- board whose order is desc (true) or asc.
  function Members.before(a, b, desc)
    if desc then return bytes_after(a, b) end
    return bytes_after(b, a)
  end
end
