-- apply/batch.lua: reads an apply call's batch, one MessagePack stream of
-- top-level values (read in chunks by cmsgpack.unpack_limit, whose values
-- land in arrays made in one step, and numbers arrive as numbers):
--
--   M, then the batch's M distinct members;
--   for each period j = 1..P: L, then the indexes (into the members,
--     1-based) of the L distinct members written to it, or L = -1 alone
--     when those are all M members in order;
--   S, then S shapes: W, then W period indexes (1-based), the distinct
--     lists of periods the events write;
--   E, then the E events' markers (Const.MARKER_BYTES each, see markers.lua);
--   then per event, `stride` values: f, offset, m, num, shape, [tie], [ts],
--     [meta], [rts], [eid], [cols]
--     f: index of the event's field; m: index of its member; num: the delta
--     for "sum", the packed stored score otherwise; tie (only for "sum"
--     with SHIFT > 1): the tie component packed with a new total; ts (only
--     for "latest", rate limits and integrity rules): the event time, epoch
--     ms; meta (only
--     for boards that keep metadata): the event's meta, "" for none; rts
--     (only for boards that seal): the record timestamp, ms; eid (only for
--     boards with integrity rules): the event id, as text; cols (only for
--     boards ranked by several columns): the event's n values, in column
--     order, then the row the event makes on its own as the rows hash
--     stores it (apply/columns.lua; num is then 0).
-- (The grouping is done by the worker, so that the script keeps its
-- per-member state in tables indexed by number.)

local Batch = {}
do
  local unpack_limit = cmsgpack.unpack_limit
  -- Lua's C stack takes a few thousand values at a time.
  local TAKE = 4000
  Batch.TAKE = TAKE

  -- A reader of payload: r.take1() is its next value, r.take(n) its next n
  -- values as an array (unpack_limit leaves them on the stack, from where
  -- {...} stores them in one step, not one table write each).
  local function reader(payload)
    local pos = 0
    local function rest(next_pos, ...)
      pos = next_pos
      return { ... }
    end
    local r = {}
    function r.take(n)
      if n <= TAKE then
        if n == 0 then return {} end
        return rest(unpack_limit(payload, n, pos))
      end
      local t, k = {}, 0
      while k < n do
        local part = rest(unpack_limit(payload, math.min(TAKE, n - k), pos))
        for x = 1, #part do t[k + x] = part[x] end
        k = k + #part
      end
      return t
    end
    function r.take1()
      local next_pos, v = unpack_limit(payload, 1, pos)
      pos = next_pos
      return v
    end
    return r
  end

  -- The batch's head, up to its events: members, nm; lists[j] (false: every
  -- member in order) and list_len[j] per period; shapes[sh] and
  -- shape_len[sh]; ne and ids (the markers); and the reader, at the events.
  function Batch.read(payload, np)
    local r = reader(payload)
    local b = { reader = r }
    b.members = r.take(r.take1())
    b.nm = #b.members
    b.lists, b.list_len = {}, {}
    for j = 1, np do
      local l = r.take1()
      if l < 0 then
        b.lists[j], b.list_len[j] = false, b.nm
      else
        b.lists[j], b.list_len[j] = r.take(l), l
      end
    end
    b.shapes, b.shape_len = {}, {}
    for sh = 1, r.take1() do
      local w = r.take1()
      b.shapes[sh], b.shape_len[sh] = r.take(w), w
    end
    b.ne = r.take1()
    b.ids = r.take(b.ne)
    return b
  end

  -- Where each optional value sits in an event: the stride and the places
  -- (1-based from the event's first value) of tie, ts, meta, rts and eid, nil
  -- when absent. h: the call's header (see apply.lua).
  function Batch.layout(h)
    local at, stride = {}, 5
    local function opt(name, on)
      if on then
        stride = stride + 1
        at[name] = stride
      end
    end
    opt('tie', h.op == 'sum' and h.shift > 1)
    opt('ts', h.op == 'latest' or h.rate_events > 0 or h.rules ~= nil or h.cols ~= nil)
    opt('meta', h.meta)
    opt('rts', h.sealed ~= nil)
    opt('eid', h.rules ~= nil)
    if h.cols then
      at.cols = stride + 1
      stride = stride + h.cols.n + 1
    end
    at.stride = stride
    return at
  end
end
