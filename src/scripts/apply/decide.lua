-- apply/decide.lua: phase 2 of an apply call: each event, in order,
-- against the values phase 1 read, held in the script (a member that
-- appears twice sees its own earlier write). Only refusals and rate-limit
-- windows are written here; the rest waits for phase 3.
--
-- An event's code (see Codes): REDELIVERED (or the refusal remembered for
-- it) for an offset at or below the one recorded for its partition, else
-- the offset advances and: DUPLICATE when its marker is set (or set earlier
-- in this call); OUT_OF_RANGE when a sum would pass the allowed value;
-- PERIOD_CLOSED when every period of the event is sealed or closed to it;
-- ATTEMPTS_EXHAUSTED when the member has used max_attempts in every open
-- period of the event (a period where it has attempts left takes the
-- event, counted there, and the others skip it); RATE_LIMITED when the
-- member's window is full; HELD[rule + 1] or RULE_REFUSED[rule + 1] when an
-- integrity rule (rules.lua) holds or refuses it (HIDE[rule + 1]: held, and
-- the member reached hold_hides_after), the value that broke it
-- following the code in the reply; else APPLIED, and its marker is added
-- (a held event's marker too: it is seen, and counts nowhere).

local ApplyDecide = {}
do
  local call, floor, format = redis.call, math.floor, string.format
  local APPLIED, DUPLICATE = Codes.APPLIED, Codes.DUPLICATE
  local OUT_OF_RANGE, RATE_LIMITED = Codes.OUT_OF_RANGE, Codes.RATE_LIMITED
  local PERIOD_CLOSED, ATTEMPTS_EXHAUSTED = Codes.PERIOD_CLOSED, Codes.ATTEMPTS_EXHAUSTED
  local HELD, RULE_REFUSED, HIDE = Codes.HELD, Codes.RULE_REFUSED, Codes.HIDE
  -- The rule (from 0) a held code names.
  local HELD_RULE = {}
  for i, c in ipairs(HELD) do HELD_RULE[c] = i - 1 end

  -- The sliding window (ts - window, ts] of admitted events: full(member,
  -- ts) when no more fits, admit(member, ts, id) to take a place in it.
  local function rate_window(h)
    local prefix, events, window = h.rate, h.rate_events, h.rate_window
    local function full(member, ts)
      return call('ZCOUNT', prefix .. member, '(' .. (ts - window), ts) >= events
    end
    local function admit(member, ts, id)
      local rl = prefix .. member
      call('ZADD', rl, ts, id)
      -- Entries older than two windows can no longer matter, unless events
      -- arrive more than a window out of order; this bounds the set's size.
      call('ZREMRANGEBYSCORE', rl, '-inf', '(' .. (ts - 2 * window))
      call('PEXPIRE', rl, 2 * window + 86400000)
    end
    return full, admit
  end

  -- What every event's decision reads, gathered once per call from the
  -- header (h), phase 1's tables (A) and what this phase fills for phase 3.
  local function context(A)
    local h, at = A.h, A.at
    local cx = {
      op = h.op, shift = h.shift, unit = A.unit, maxv = h.max_value,
      is_sum = A.is_sum, latest = A.latest, seal_on = A.seal_on, meta_on = A.meta_on,
      attempts_on = A.attempts_on, att_limit = h.attempts, att = A.att, att_moved = A.att_moved,
      rate_on = h.rate_events > 0, rules = A.rules, eid_at = at.eid, review = h.review,
      cols = A.cols, cols_at = at.cols,
      members = A.members, shapes = A.shapes, shape_len = A.shape_len,
      closes = A.closes, times = A.times, fields = h.fields,
      tie_at = at.tie, ts_at = at.ts, meta_at = at.meta, rts_at = at.rts,
      -- League boards: rounds[j] collects the members with an event applied to round j.
      rounds = A.rounds,
      -- Boards with notify_top (see changes.lua): trans[j] the moves of period
      -- j in event order, flat (i, m, value before, value after), and
      -- trans[-j] their length; pos and redone the field (at i) and offset
      -- (at -i) of event i, applied with a move or redelivered.
      trans = A.trans, pos = A.pos, redone = A.redone, hidden = A.hidden,
    }
    -- shape_cur[sh][w]: cur of shape sh's period w, false for a sealed period
    -- (the only kind phase 1 does not read), so that each event finds its
    -- periods' values in one lookup.
    local shape_cur = {}
    for sh = 1, #A.shapes do
      local sc = {}
      for w = 1, A.shape_len[sh] do sc[w] = A.cur[A.shapes[sh][w]] or false end
      shape_cur[sh] = sc
    end
    cx.shape_cur = shape_cur
    cx.rate_full, cx.admit = rate_window(h)
    -- moved ("latest": j -> m -> true when m's event time moved) and metas
    -- (boards with metadata: j -> m -> the meta of the event that last
    -- decided m's value, "" for none), for phase 3.
    local moved, metas = {}, {}
    for j = 1, A.np do
      if cx.latest then moved[j] = {} end
      if cx.meta_on then metas[j] = {} end
    end
    cx.moved, cx.metas = moved, metas
    return cx
  end

  -- The periods of shape sh that take member m's event of record time rts:
  -- tk[w] is period w's values, or false where it is sealed (closed at rts)
  -- or m has used its attempts there. Also whether any period is open
  -- (only sealing can close every one) and whether any takes the event
  -- (only max_attempts can exhaust them).
  local function takers(cx, sh, m, rts, any_attempts)
    local sc = cx.shape_cur[sh]
    if not (cx.seal_on or cx.attempts_on) then return sc, true, true end
    local shape, closes, att, limit = cx.shapes[sh], cx.closes, cx.att, cx.att_limit
    local tk, any_open, any_take = {}, false, false
    for w = 1, cx.shape_len[sh] do
      local c = sc[w]
      local close = cx.seal_on and closes[shape[w]]
      if c and close and rts >= close then c = false end
      if c then
        any_open = true
        if cx.attempts_on and not any_attempts and att[shape[w]][m] >= limit then c = false end
        if c then any_take = true end
      end
      tk[w] = c
    end
    return tk, any_open, any_take
  end

  -- Sum boards: totals[w] set to each taking period's new total for m once
  -- num is added; false when one would leave the allowed range.
  local function sum_fits(cx, tk, nw, m, num, totals)
    local fits, unit, shift, maxv = true, cx.unit, cx.shift, cx.maxv
    for w = 1, nw do
      local c = tk[w]
      if c then
        local old = c[m]
        local total = num
        if old then total = (unit and old or floor(old / shift)) + num end
        if total > maxv or total < -maxv then fits = false end
        totals[w] = total
      end
    end
    return fits
  end

  -- Boards ranked by several columns: totals[w] set to each taking
  -- period's row for m after the event at ev[a]; false when a sum column's
  -- total would leave the allowed range in one of them.
  local function rows_fit(cx, tk, nw, m, ev, a, totals)
    local next_row, at, ts = cx.cols.next, a + cx.cols_at, ev[a + cx.ts_at]
    -- The periods of an event often hold the same row before it (a
    -- player's day, week and all time alike): worked out once.
    local last_old, last_row = nil, nil
    for w = 1, nw do
      local c = tk[w]
      if c then
        local old = c[m]
        local row = last_row
        if old ~= last_old or last_row == nil then
          row = next_row(old, ev, at, ts)
          last_old, last_row = old, row
        end
        if not row then return false end
        totals[w] = row
      end
    end
    return true
  end

  -- The code of a new event (neither redelivered nor a duplicate) at ev[a],
  -- field f, offset off, member m, value num, shape sh: APPLIED or why not
  -- (with the value that broke an integrity rule); and its taking periods
  -- (tk), with their totals on sum boards.
  local function judge(cx, ev, a, f, off, m, num, sh, totals)
    local rts = cx.seal_on and ev[a + cx.rts_at]
    local tk, any_open, any_take = takers(cx, sh, m, rts)
    if cx.is_sum and not sum_fits(cx, tk, cx.shape_len[sh], m, num, totals) then return OUT_OF_RANGE, tk end
    if cx.cols and not rows_fit(cx, tk, cx.shape_len[sh], m, ev, a, totals) then return OUT_OF_RANGE, tk end
    if not any_open then return PERIOD_CLOSED, tk end
    if not any_take then return ATTEMPTS_EXHAUSTED, tk end
    local ts = cx.ts_at and ev[a + cx.ts_at]
    if cx.rate_on and cx.rate_full(cx.members[m], ts) then return RATE_LIMITED, tk end
    if cx.rules then
      local rule, observed, hold = cx.rules.check(m, num, ts, sh, cx.shape_cur, ev, a)
      if rule then return (hold and HELD or RULE_REFUSED)[rule + 1], tk, observed end
    end
    if cx.rate_on then cx.admit(cx.members[m], ts, cx.fields[f] .. ':' .. format('%d', off)) end
    return APPLIED, tk
  end

  -- The code of a review (cx.review: the held event's id and whether it is
  -- approved) carried by the event at ev[a] (member m, value num, shape
  -- sh, the held event's own): UNKNOWN_HELD or DECIDED when the held event
  -- is not pending; a rejection is APPLIED with nothing to write; an
  -- approval takes the periods open at the record's time, attempts or not,
  -- and is APPLIED unless every one is closed or a total would leave the
  -- range (the held event stays pending).
  local function review(cx, ev, a, m, num, sh, totals)
    local rv, rules = cx.review, cx.rules
    local rec, refusal = rules.reviewed(rv.id)
    if refusal then return refusal end
    if not rec then
      -- A rebuild read the review before the event it decides.
      rules.decide_early(rv.id, m, rv.approve and 'approved' or 'rejected')
      return APPLIED, {}
    end
    if not rv.approve then
      rules.decide(rv.id, rec, 'rejected')
      return APPLIED, {}
    end
    local tk, any_open = takers(cx, sh, m, cx.seal_on and ev[a + cx.rts_at], true)
    if cx.is_sum and not sum_fits(cx, tk, cx.shape_len[sh], m, num, totals) then return OUT_OF_RANGE, tk end
    if cx.cols and not rows_fit(cx, tk, cx.shape_len[sh], m, ev, a, totals) then return OUT_OF_RANGE, tk end
    if not any_open then return PERIOD_CLOSED, tk end
    rules.decide(rv.id, rec, 'approved')
    rules.applied(m, ev[a + cx.ts_at], num)
    return APPLIED, tk
  end

  -- m's value c[m] in period j after the event (value num, time ts, tie,
  -- meta; total on sum boards), as the board's mode combines them: a sum's
  -- total with its tie, a newer latest value, a better best.
  local function combine(cx, c, j, m, num, total, tie, ts, meta)
    if cx.cols then
      -- total: the row rows_fit made (the one before when nothing moved).
      if meta and total ~= c[m] then cx.metas[j][m] = meta end
      c[m] = total
    elseif cx.is_sum then
      c[m] = total * cx.shift + tie
      if meta then cx.metas[j][m] = meta end
    elseif cx.latest then
      local seen = cx.times[j][m]
      if not seen or ts > seen then
        cx.times[j][m] = ts
        c[m] = num
        cx.moved[j][m] = true
        if meta then cx.metas[j][m] = meta end
      end
    else
      local old, op = c[m], cx.op
      if not old or (op == 'gt' and num > old) or (op == 'lt' and num < old) then
        c[m] = num
        if meta then cx.metas[j][m] = meta end
      end
    end
  end

  -- Applies event i (at ev[a]: field f, offset off, member m, value num,
  -- shape sh) to each period that takes it (tk; a sealed period or one
  -- whose attempts are used is skipped, the others still count it): its
  -- value, its league round, its attempts and its rank move.
  local function apply_event(cx, ev, a, i, f, off, m, num, sh, tk, totals)
    local tie = cx.tie_at and ev[a + cx.tie_at] or 0
    local meta = cx.meta_on and ev[a + cx.meta_at]
    local ts = cx.latest and ev[a + cx.ts_at]
    local shape, rounds, trans = cx.shapes[sh], cx.rounds, cx.trans
    for w = 1, cx.shape_len[sh] do
      local c = tk[w]
      if c then
        local j = shape[w]
        local was = c[m]
        if rounds then
          local joined = rounds[j]
          if joined and not joined.seen[m] then
            joined.seen[m] = true
            joined.list[#joined.list + 1] = m
          end
        end
        if cx.attempts_on then
          cx.att[j][m] = cx.att[j][m] + 1
          cx.att_moved[j][m] = true
        end
        combine(cx, c, j, m, num, totals[w], tie, ts, meta)
        if trans and c[m] ~= was and not cx.hidden[m] then
          local list, n = trans[j], trans[-j]
          list[n + 1], list[n + 2], list[n + 3], list[n + 4] = i, m, was, c[m]
          trans[-j], cx.pos[i], cx.pos[-i] = n + 4, f, off
        end
      end
    end
  end

  -- Phase 2. Returns the reply (E, then (i, code) for each event not
  -- applied) and last_off (field -> the newest offset seen); sets A.moved
  -- and A.metas (see context).
  function ApplyDecide.run(A, offsets, markers)
    local cx = context(A)
    A.moved, A.metas = cx.moved, cx.metas
    local stride, take, ids, ne, recorded = A.at.stride, A.reader.take, A.ids, A.ne, offsets.recorded
    local last_off, totals = {}, {}
    local out, nout = { ne }, 1
    local marked = markers.seen(ids)
    -- marks_in[id]: the event was applied earlier in this call.
    local marks_in = {}
    local per_take = floor(Batch.TAKE / stride)
    local i = 0
    while i < ne do
      local ev = take(math.min(per_take, ne - i) * stride)
      for a = 0, #ev - stride, stride do
        i = i + 1
        local f, off, m, num, sh = ev[a + 1], ev[a + 2], ev[a + 3], ev[a + 4], ev[a + 5]
        local code, observed
        if off <= (last_off[f] or recorded[f]) then
          code, observed = offsets.redelivered(f, off)
          if cx.trans then cx.redone[i], cx.redone[-i] = f, off end
        else
          last_off[f] = off
          local id, tk = ids[i], nil
          if marked[i] or marks_in[id] then
            code = DUPLICATE
          elseif cx.review then
            code, tk = review(cx, ev, a, m, num, sh, totals)
          else
            code, tk, observed = judge(cx, ev, a, f, off, m, num, sh, totals)
          end
          if code == APPLIED then
            marks_in[id] = true
            markers.add(i)
            apply_event(cx, ev, a, i, f, off, m, num, sh, tk, totals)
            if cx.rules and not cx.review then cx.rules.applied(m, ev[a + cx.ts_at], num) end
          elseif code >= OUT_OF_RANGE then
            local rule = HELD_RULE[code]
            if rule then
              -- Held: seen (a producer retry is a duplicate), counted nowhere.
              marks_in[id] = true
              markers.add(i)
              local meta = cx.meta_on and ev[a + cx.meta_at]
              local past, early = cx.rules.hold(ev[a + cx.eid_at], m, num, ev[a + cx.ts_at], rule, observed, meta, ev, a)
              if past then code = HIDE[rule + 1] end
              if early == 'approved' then
                code, observed = APPLIED, nil
                apply_event(cx, ev, a, i, f, off, m, num, sh, tk, totals)
                cx.rules.applied(m, ev[a + cx.ts_at], num)
              end
            end
            if code ~= APPLIED then offsets.refuse(f, off, code, observed) end
          end
        end
        if code ~= APPLIED then
          out[nout + 1], out[nout + 2] = i, code
          nout = nout + 2
          if observed then
            out[nout + 1] = observed
            nout = nout + 1
          end
        end
      end
    end
    return out, last_off
  end
end
