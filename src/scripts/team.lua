-- team.lua: applies a batch of events to ONE team board tag (one hash
-- slot), atomically: scores, and the membership events (team_joined,
-- team_left) that decide which team a score counts for.
--
-- For each event, in order, as apply.lua does: a record at or below the
-- tag's recorded offset for its topic-partition is a redelivery and
-- changes nothing; otherwise the offset advances, and only when the
-- event's dedupe marker is absent is the event applied (team/teams.lua)
-- and the marker set, in the same atomic step.
--
-- Admin events on a team board (player_hidden, player_unhidden,
-- player_removed, player_erased, team_hidden, team_unhidden) come as events
-- of a call of their own, each alone (see team/teams.lua).
--
-- keys by name: offsets registry members hidden teams_hidden sealed key
-- derives: refused seen contrib shadow_contrib team_set index period shadow
--   (refusals per record, marker buckets, each period's contributions and
--   hidden players' ones, each period's teams' sets of contributors, each
--   player's list of contributions, period keys and their shadows a leave
--   or a hidden team reaches: each prefix is a header field)
-- ARGV[1]  the header, a MessagePack map (built by src/store/write/team.rs):
--   op          "sum", "gt" / "lt" (keep the best; gt: higher is better)
--   max_value   largest |contribution| and |team score| a sum may reach
--   leave       "keep" | "forfeit"
--   counts_after  ms after a join before the player's scores count
--   ttl, refused, seen, fields   as apply.lua's
--   offsets, registry, members, hidden, teams_hidden   KEYS indexes of the
--               tag's offsets hash, registry of period keys, members hash,
--               hidden players and hidden teams
--   sealed      boards that seal only: KEYS index of the tag's sealed hash
--               (a sealed period, or one closed on demand before the
--               record's time, takes no score; a forfeit and a hide leave
--               it as sealed; a removal and an erasure reach it, snapshot
--               included)
--   period, shadow, contrib, shadow_contrib, team_set, index   prefixes:
--               of period keys and their shadows, of the periods'
--               contributions hashes and hidden players' ones (the script
--               appends the period id), of the teams' sets of contributors
--               (it appends "<period id>:<team id>") and of players'
--               contribution lists (it appends the player id)
--   periods     per period j: key (KEYS index of the period key), id (the
--               period id) and expire_at (EXPIREAT seconds, 0: none)
-- ARGV[2]  the preconditions (see apply.lua)
-- ARGV[3]  the batch, two MessagePack values: the events' markers (an
--          array), then the events, flat: per event f (field index),
--          offset, player, kind (0 score, 1 join, 2 leave, 3 hide, 4 unhide,
--          5 remove, 6 erase, 7 hide a team, 8 show it), num (the score: a
--          sum's delta, a best's value), ts (event time, ms), text (a
--          membership's or team event's team id, a removal's period id, ""
--          for none), rts (the record's timestamp, ms), n, then n period
--          indexes (1-based, into the header's periods).
--
-- Returns LOST or STALE as apply.lua does; otherwise E, the microseconds
-- the call took, then (i, code) for each event i not applied.

local started = redis.call('TIME')
local h = cmsgpack.unpack(ARGV[1])
local lost = Registered.check(KEYS[h.offsets])
if lost then return lost end
local offsets = Offsets.open(KEYS[h.offsets], h.fields, h.refused, h.ttl)
local stale = offsets.stale(cmsgpack.unpack(ARGV[2]))
if stale then return stale end

local ids, ev = cmsgpack.unpack(ARGV[3])
local state = TeamState.open(h)
TeamScores.prefetch(state, ev, #ids)
local markers = Markers.open(h.seen, h.ttl)
local marked = markers.seen(ids)
local APPLIED, DUPLICATE = Codes.APPLIED, Codes.DUPLICATE
local ne, recorded = #ids, offsets.recorded
local out, last_off, marks_in = { ne }, {}, {}
local a = 0
for i = 1, ne do
  local f, off, player, kind, num, ts, text, rts, np = unpack(ev, a + 1, a + 9)
  local at = a + 9
  a = at + np
  local code
  if off <= (last_off[f] or recorded[f]) then
    code = offsets.redelivered(f, off)
  else
    last_off[f] = off
    local id = ids[i]
    if marked[i] or marks_in[id] then
      code = DUPLICATE
    else
      if kind == 0 then
        code = TeamScores.score(state, player, num, ts, rts, ev, at, np)
      else
        code = Teams.event(state, kind, player, num, ts, text, ev, at, np)
      end
      if code == APPLIED then
        marks_in[id] = true
        markers.add(i)
      else
        offsets.refuse(f, off, code)
      end
    end
  end
  if code ~= APPLIED then
    out[#out + 1] = i
    out[#out + 1] = code
  end
end
offsets.record(last_off)
markers.flush()
TeamState.flush(state)
local registered = {}
for j in pairs(state.written) do registered[#registered + 1] = state.pkeys[j] end
Calls.variadic('SADD', KEYS[h.registry], registered, 1)
local ended = redis.call('TIME')
table.insert(out, 2, (ended[1] - started[1]) * 1000000 + (ended[2] - started[2]))
return out
