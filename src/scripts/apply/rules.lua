-- apply/rules.lua: a board's integrity rules ([board.integrity]), decided
-- in the apply call's phase 2 after the board's own refusals and before
-- the rate limit admits the event, so that a held event spends no attempt
-- and no rate-limit slot:
--   score   the event's value (its delta on sum boards) above limit
--   gain    sum boards: the member's applied deltas with event times in
--           (ts - window, ts], plus this one, above limit
--   hides   hold_hides_after: count, window, and the prefix of the
--           members' held events' times (see r.hold)
--   jump    best boards: a new best beyond the member's all-time best (the
--           period the header marks all_time) by more than amount, or by
--           more than ratio (thousandths) when that best is positive
--   better  boards ranked by several columns: the value better than limit
--           by its column's order (above it on desc, below it on asc)
-- Each rule has hold = true (the event is held for review) or false (it is
-- refused, naming the rule). A broken rule that refuses wins over one that
-- holds; among those alike, the first in that order. On a board ranked by
-- several columns, score, jump and better each judge their column (from
-- 1): score its value, jump its value against that column's value in the
-- member's all-time best row, in its order.
--
-- Held events (r.hold): the held hash maps the event id to its record
-- (MessagePack: state "pending", member, value, ts, rule, observed, stamp,
-- meta, and on boards ranked by several columns the event's values, value
-- then 0; the stamp is the call's time in µs, 16 digits, and the event's
-- place among those the call held, 4 digits), the queue zset (lex order,
-- all scores 0) holds "<stamp>:<id>" of every pending one, and
-- "<pqueue><member>" the member's own. A review (the header's review, one admin event alone
-- in its call) decides a pending one: approved (its event applied as if it
-- had passed the rules, without attempts or the rate limit) or rejected;
-- either leaves both queues and stays in the hash, decided.
--
-- Gain windows: apply/gain.lua.

local ApplyRules = {}
do
  local call, floor, format, min = redis.call, math.floor, string.format, math.min
  local pack, unpack_mp = cmsgpack.pack, cmsgpack.unpack
  local CHUNK = Calls.CHUNK
  local SCORE, GAIN, JUMP, BETTER = 0, 1, 2, 3

  -- all_at[sh]: the place of the all_time period in shape sh.
  local function all_time_places(A)
    local all_at = {}
    for sh = 1, #A.shapes do
      for w = 1, A.shape_len[sh] do
        if A.h.periods[A.shapes[sh][w]].all_time then all_at[sh] = w end
      end
    end
    return all_at
  end

  -- Member m's value in the all-time period (place w of shape sh, whose
  -- periods' values are shape_cur[sh]); nil without one.
  local function all_time(shape_cur, sh, w, m)
    local c = w and shape_cur[sh][w]
    return c and c[m]
  end

  -- Whether value is a new best beyond best by more than jump allows.
  local function jumped(jump, desc, value, best)
    if desc then
      return (jump.amount and value > best + jump.amount) or (jump.ratio and best > 0 and value * 1000 > best * jump.ratio)
    end
    return (jump.amount and value < best - jump.amount) or (jump.ratio and best > 0 and value * jump.ratio < best * 1000)
  end

  -- The check of a board ranked by several columns (header rules R):
  -- member m's event at ev[a] (its values at ev[a + A.at.cols ...]),
  -- shape sh whose periods' rows are shape_cur[sh]; all_at as above.
  local function row_check(A, R, all_at)
    local score, jump, better, cols, cols_at = R.score, R.jump, R.better, A.cols, A.at.cols
    return function(m, sh, shape_cur, ev, a)
      local at = a + cols_at - 1
      local found, observed, hold
      if score and ev[at + score.column] > score.limit then
        found, observed, hold = SCORE, ev[at + score.column], score.hold
      end
      local old = jump and (found == nil or hold) and all_time(shape_cur, sh, all_at[sh], m)
      if old then
        local best = cols.value(old, jump.column)
        if jumped(jump, cols.desc[jump.column], ev[at + jump.column], best) and (found == nil or not jump.hold) then
          found, observed, hold = JUMP, best, jump.hold
        end
      end
      if better and (found == nil or hold) then
        local v, limit, desc = ev[at + better.column], better.limit, cols.desc[better.column]
        if ((desc and v > limit) or (not desc and v < limit)) and (found == nil or not better.hold) then
          found, observed, hold = BETTER, v, better.hold
        end
      end
      return found, observed, hold
    end
  end

  -- hold_hides_after (hides): whether the member named name, with its
  -- event id held at event time ts, has now had count held within the
  -- window ending at ts.
  local function past_limit(hides, name, id, ts)
    if not hides then return false end
    local key, window = hides.prefix .. name, hides.window
    call('ZADD', key, ts, id)
    call('ZREMRANGEBYSCORE', key, '-inf', '(' .. (ts - 2 * window))
    call('PEXPIRE', key, 2 * window + 86400000)
    return call('ZCOUNT', key, '(' .. (ts - window), ts) >= hides.count
  end

  -- The rules of the call (nil without any): reads the gain windows of
  -- A's members.
  function ApplyRules.open(A, now_us)
    local R = A.h.rules
    if not R then return nil end
    local r = {}
    local shift, sum, desc = A.h.shift, A.is_sum, A.h.op ~= 'lt'
    local score, gain, jump = R.score, R.gain, R.jump
    local cols, cols_at = A.cols, A.at.cols
    local score_limit, score_hold = score and score.limit, score and score.hold
    local gain_limit, gain_window, gain_hold = gain and gain.limit, gain and gain.window, gain and gain.hold
    -- Events held in this call, so far: their stamps keep the order they were held in.
    local held_n = 0
    local held_key, queue_key = KEYS[R.held], KEYS[R.queue]
    local rv_early = A.h.review and A.h.review.early
    local members = A.members
    local windows = gain and ApplyGain.open(A, KEYS[R.gain_key], gain_window)
    local all_at = R.jump and all_time_places(A) or {}
    local check_row = cols and row_check(A, R, all_at)

    -- The rule broken by member m's event (value num as the batch sends it,
    -- time ts, shape sh, whose periods' values are shape_cur[sh]; at ev[a]):
    -- rule, observed value, hold; nil when none is.
    function r.check(m, num, ts, sh, shape_cur, ev, a)
      if cols then return check_row(m, sh, shape_cur, ev, a) end
      local value = sum and num or floor(num / shift)
      -- The first rule broken that refuses, else the first that holds.
      local found, observed, hold
      if score and value > score_limit then found, observed, hold = SCORE, value, score_hold end
      if gain and (found == nil or hold) then
        local total = windows.total(m, ts) + num
        if total > gain_limit and (found == nil or not gain_hold) then found, observed, hold = GAIN, total, gain_hold end
      end
      local old = jump and (found == nil or hold) and all_time(shape_cur, sh, all_at[sh], m)
      if old then
        local best = floor(old / shift)
        if jumped(jump, desc, value, best) and (found == nil or not jump.hold) then
          found, observed, hold = JUMP, best, jump.hold
        end
      end
      return found, observed, hold
    end

    -- Member m's event (time ts, delta num) was applied: it joins m's window.
    function r.applied(m, ts, num)
      if windows then windows.applied(m, ts, num) end
    end

    -- Holds event id of member m: its record, and its place in both
    -- queues. Returns whether m is now past hold_hides_after. A rebuild
    -- may have read the review of the event first (r.decide_early): then
    -- it is recorded as decided at once, out of the queues, and the answer
    -- is that decision ("approved": the caller applies the event).
    function r.hold(id, m, num, ts, rule, observed, meta, ev, a)
      local value = sum and num or floor(num / shift)
      held_n = held_n + 1
      local stamp = format('%016d%04d', now_us, held_n)
      local early = call('HGET', held_key, id)
      local state = early and unpack_mp(early)[1] or 'pending'
      local rec = { state, members[m], value, ts, rule, observed, stamp, meta or '' }
      if cols then
        local values = {}
        for i = 1, cols.n do values[i] = ev[a + cols_at + i - 1] end
        rec[3], rec[9] = 0, values
      end
      call('HSET', held_key, id, pack(rec))
      if state ~= 'pending' then return false, state end
      local place = stamp .. ':' .. id
      call('ZADD', queue_key, 0, place)
      call('ZADD', R.pqueue .. members[m], 0, place)
      return past_limit(R.hides, members[m], id, ts)
    end

    -- A rebuild's review of held event id (member m) read before the event:
    -- the decision, recorded for r.hold to find.
    function r.decide_early(id, m, state)
      call('HSET', held_key, id, pack({ state, members[m], 0, 0, 0, 0, format('%016d%04d', now_us, 0), '' }))
    end

    -- A review's held event id: its record, and nil while it is pending,
    -- else why it cannot be decided (UNKNOWN_HELD, DECIDED).
    function r.reviewed(id)
      local blob = call('HGET', held_key, id)
      if not blob and rv_early then return nil, nil end
      if not blob then return nil, Codes.UNKNOWN_HELD end
      local rec = unpack_mp(blob)
      if rec[1] ~= 'pending' then return rec, Codes.DECIDED end
      return rec, nil
    end

    -- Held event id (its record rec) is decided (state "approved" or
    -- "rejected"): recorded so, and out of both queues.
    function r.decide(id, rec, state)
      rec[1] = state
      call('HSET', held_key, id, pack(rec))
      local place = rec[7] .. ':' .. id
      call('ZREM', queue_key, place)
      call('ZREM', R.pqueue .. rec[2], place)
    end

    -- Phase 3: the moved gain windows.
    function r.flush()
      if windows then windows.flush() end
    end

    return r
  end
end
