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
-- member's window is full; else APPLIED, and its marker is added.

local ApplyDecide = {}
do
  local call, floor, format = redis.call, math.floor, string.format
  local APPLIED, DUPLICATE = Codes.APPLIED, Codes.DUPLICATE
  local OUT_OF_RANGE, RATE_LIMITED = Codes.OUT_OF_RANGE, Codes.RATE_LIMITED
  local PERIOD_CLOSED, ATTEMPTS_EXHAUSTED = Codes.PERIOD_CLOSED, Codes.ATTEMPTS_EXHAUSTED

  -- The sliding window (ts - window, ts] of admitted events: true if one more fits.
  local function admitter(h)
    local prefix, events, window = h.rate, h.rate_events, h.rate_window
    return function(member, ts, id)
      local rl = prefix .. member
      if call('ZCOUNT', rl, '(' .. (ts - window), ts) >= events then
        return false
      end
      call('ZADD', rl, ts, id)
      -- Entries older than two windows can no longer matter, unless events
      -- arrive more than a window out of order; this bounds the set's size.
      call('ZREMRANGEBYSCORE', rl, '-inf', '(' .. (ts - 2 * window))
      call('PEXPIRE', rl, 2 * window + 86400000)
      return true
    end
  end

  -- Phase 2. Returns the reply (E, then (i, code) for each event not
  -- applied) and last_off (field -> the newest offset seen); sets A.moved
  -- ("latest": j -> m -> true when m's event time moved) and A.metas (boards
  -- with metadata: j -> m -> the meta of the event that last decided m's
  -- value, "" for none).
  function ApplyDecide.run(A, offsets, markers)
    local h, at = A.h, A.at
    local op, shift, unit, maxv = h.op, h.shift, A.unit, h.max_value
    local is_sum, latest, seal_on, meta_on = A.is_sum, A.latest, A.seal_on, A.meta_on
    local attempts_on, att_limit, att = A.attempts_on, h.attempts, A.att
    local rate_on, admit = h.rate_events > 0, admitter(h)
    local members, shapes, shape_len, ids, ne = A.members, A.shapes, A.shape_len, A.ids, A.ne
    local closes, times, att_moved = A.closes, A.times, A.att_moved
    local fields, recorded = h.fields, offsets.recorded
    local stride, tie_at, ts_at, meta_at, rts_at = at.stride, at.tie, at.ts, at.meta, at.rts
    local take = A.reader.take
    -- League boards: rounds[j] collects the members with an event applied to round j.
    local rounds = A.rounds
    -- Boards with notify_top (see changes.lua): trans[j] the moves of period
    -- j in event order, flat (i, m, value before, value after), and
    -- trans[-j] their length; pos and
    -- redone the field (at i) and offset (at -i) of event i, applied with a
    -- move or redelivered.
    local trans, pos, redone, hidden = A.trans, A.pos, A.redone, A.hidden

    -- shape_cur[sh][w]: cur of shape sh's period w, false for a sealed period
    -- (the only kind phase 1 does not read), so that the loop below finds each
    -- of its periods' values in one lookup.
    local shape_cur = {}
    for sh = 1, #shapes do
      local sc = {}
      for w = 1, shape_len[sh] do sc[w] = A.cur[shapes[sh][w]] or false end
      shape_cur[sh] = sc
    end
    local moved, metas = {}, {}
    for j = 1, A.np do
      if latest then moved[j] = {} end
      if meta_on then metas[j] = {} end
    end
    A.moved, A.metas = moved, metas

    local last_off, totals = {}, {}
    local out, nout = { ne }, 1
    local marked = markers.seen(ids)
    -- marks_in[id]: the event was applied earlier in this call.
    local marks_in = {}
    local per_take = floor(Batch.TAKE / stride)
    -- tk: the periods of the current event's shape that take it.
    local tk
    local i = 0
    while i < ne do
      local ev = take(math.min(per_take, ne - i) * stride)
      for a = 0, #ev - stride, stride do
        i = i + 1
        local f, off, m, num, sh = ev[a + 1], ev[a + 2], ev[a + 3], ev[a + 4], ev[a + 5]
        local sc, nw = shape_cur[sh], shape_len[sh]
        local last = last_off[f] or recorded[f]
        local code = APPLIED
        if off <= last then
          code = offsets.redelivered(f, off)
          if trans then redone[i], redone[-i] = f, off end
        else
          last_off[f] = off
          local id = ids[i]
          if marked[i] or marks_in[id] then
            code = DUPLICATE
          else
            -- The shape's periods that take the event: sc[w] is false for a
            -- sealed one, and with max_attempts (tk) so is one where the
            -- member has used its attempts. Only sealing can close every
            -- period, and only max_attempts can exhaust them.
            local any_open, any_take = not seal_on, true
            if seal_on or attempts_on then
              any_open, any_take = false, false
              tk = {}
              local shape = shapes[sh]
              for w = 1, nw do
                local c = sc[w]
                local close = seal_on and closes[shape[w]]
                if c and close and ev[a + rts_at] >= close then c = false end
                if c then
                  any_open = true
                  if attempts_on and att[shape[w]][m] >= att_limit then c = false end
                  if c then any_take = true end
                end
                tk[w] = c
              end
            else
              tk = sc
            end
            -- Only a sum can leave the allowed range. totals[w]: the sum's
            -- new total in the shape's period w, which the write below uses.
            if is_sum then
              for w = 1, nw do
                local c = tk[w]
                if c then
                  local old = c[m]
                  local total = num
                  if old then total = (unit and old or floor(old / shift)) + num end
                  if total > maxv or total < -maxv then code = OUT_OF_RANGE end
                  totals[w] = total
                end
              end
            end
            if code == APPLIED and not any_open then
              code = PERIOD_CLOSED
            elseif code == APPLIED and not any_take then
              code = ATTEMPTS_EXHAUSTED
            end
            if code == APPLIED and rate_on
              and not admit(members[m], ev[a + ts_at], fields[f] .. ':' .. format('%d', off)) then
              code = RATE_LIMITED
            end
          end
          if code == APPLIED then
            marks_in[id] = true
            markers.add(i)
            local tie = 0
            if tie_at then tie = ev[a + tie_at] end
            local meta = meta_on and ev[a + meta_at]
            for w = 1, nw do
              local c = tk[w]
              -- A sealed period (or one whose attempts are used) is skipped:
              -- the event still counts on the board's other periods.
              if c then
                local was = c[m]
                if rounds then
                  local joined = rounds[shapes[sh][w]]
                  if joined and not joined.seen[m] then
                    joined.seen[m] = true
                    joined.list[#joined.list + 1] = m
                  end
                end
                if attempts_on then
                  local j = shapes[sh][w]
                  att[j][m] = att[j][m] + 1
                  att_moved[j][m] = true
                end
                if is_sum then
                  c[m] = totals[w] * shift + tie
                  if meta then metas[shapes[sh][w]][m] = meta end
                elseif latest then
                  local j = shapes[sh][w]
                  local ts = ev[a + ts_at]
                  local seen = times[j][m]
                  if not seen or ts > seen then
                    times[j][m] = ts
                    c[m] = num
                    moved[j][m] = true
                    if meta then metas[j][m] = meta end
                  end
                else
                  local old = c[m]
                  if not old or (op == 'gt' and num > old) or (op == 'lt' and num < old) then
                    c[m] = num
                    if meta then metas[shapes[sh][w]][m] = meta end
                  end
                end
                if trans and c[m] ~= was and not hidden[m] then
                  local j = shapes[sh][w]
                  local list, n = trans[j], trans[-j]
                  list[n + 1], list[n + 2], list[n + 3], list[n + 4] = i, m, was, c[m]
                  trans[-j], pos[i], pos[-i] = n + 4, f, off
                end
              end
            end
          elseif code >= OUT_OF_RANGE then
            offsets.refuse(f, off, code)
          end
        end
        if code ~= APPLIED then
          out[nout + 1], out[nout + 2] = i, code
          nout = nout + 2
        end
      end
    end
    return out, last_off
  end
end
