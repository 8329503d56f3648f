-- value.lua: stored scores, the values they hold, and integers as the
-- decimal strings Redis takes.
--
-- Stored scores are packed: stored = value * SHIFT + tie (see src/score.rs),
-- SHIFT = 1 without a tie-break, so a value is floor(stored / SHIFT) and the
-- stored scores of value v are [v * SHIFT, (v + 1) * SHIFT). A value's name
-- in a dense index is its decimal.
--
-- Integers reach Redis as decimal strings made here: a number argument of
-- redis.call is converted by Redis with "%.17g", which costs several times
-- more (and Lua's own tostring keeps only 14 digits).

local Value = {}
do
  local format, floor, tonumber = string.format, math.floor, tonumber

  -- n as a decimal string.
  function Value.fmt(n)
    return format('%d', n)
  end

  -- A shard's version (read.lua): the sum of the values of the hash key.
  function Value.version(key)
    local v = 0
    for _, o in ipairs(redis.call('HVALS', key)) do v = v + tonumber(o) end
    return format('%d', v)
  end

  -- A formatter that keeps each decimal it made: written values repeat
  -- across members (totals and personal bests cluster), and formatting is
  -- the costliest step of a write in the interpreter. Returns the function
  -- and its table (value -> decimal), which hot loops read inline.
  function Value.decimals()
    local cache = {}
    local function dec(n)
      local s = cache[n]
      if not s then
        s = format('%d', n)
        cache[n] = s
      end
      return s
    end
    return dec, cache
  end

  -- The value of a stored score (a number or a decimal string).
  function Value.of(stored, shift)
    return floor(tonumber(stored) / shift)
  end

  -- A function giving the decimal name of a stored score's value; str, the
  -- score as Redis wrote it, is that name itself with SHIFT 1.
  function Value.namer(shift, dec)
    return function(stored, str)
      if shift == 1 and str then return str end
      return dec(floor(stored / shift))
    end
  end

  -- The lowest and highest stored score of value v.
  function Value.range(v, shift)
    return v * shift, v * shift + shift - 1
  end
end
