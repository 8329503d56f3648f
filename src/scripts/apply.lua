-- apply.lua: applies a batch of events to ONE board tag (one hash slot),
-- atomically.
--
-- For each event, in order: a record at or below the tag's recorded offset
-- for its topic-partition is a redelivery and changes nothing; otherwise
-- the offset advances, and only when the event's dedupe marker is absent
-- (and the rate limit, value range, sealing and attempts allow) are the
-- period writes made and the marker set. A marker is never set without its
-- writes, nor writes made without the marker, because the script is atomic.
--
-- The call works in three phases, so that its cost in commands does not
-- grow with one command per event and period:
--   1. read (apply/read.lua): one ZMSCORE per period for every member of
--      the batch (and HMGETs of event times and attempts where the board
--      keeps them), and the markers' buckets (markers.lua);
--   2. decide (apply/decide.lua): the events, in order, against those
--      values held in the script; only refusals and rate-limit windows are
--      written here;
--   2b. on boards with notify_top (apply/changes.lua): the ranks each
--      event's moves made in the top N, played on one read of the top;
--   3. write (apply/write.lua): the offsets, the markers of the applied
--      events in one variadic HSET, then per period one variadic ZADD of
--      the members whose value moved, top-K, the dense index and the expiry;
--   4. on league boards (apply/league.lua): the players whose first event
--      of a round this call applied join a cohort, or wait for the
--      previous round's settlement.
--
-- Hidden players (admin.lua): a player in the tag's hidden set has their
-- values in the shadow keys instead of the period keys, so their events are
-- read from and written to the shadows, and count in no dense index and no
-- top-K; everything else (offsets, markers, refusals, event times,
-- metadata) is as for any player.
--
-- keys by name: offsets hidden registry sealed key dense counts shadow times meta attempts tiers overrides state cohorts open pending prev_cohorts prev_pending held queue gain_key rows
-- derives: rate refused seen changes pqueue hides
--   (rate-limit windows per member, refusals per record, marker buckets,
--   remembered rank changes per record, pending held events and held
--   events' times per member: each prefix is a header field)
-- ARGV[1]  the header, a MessagePack map (built by src/store/write/protocol.rs;
--          its maps and fields declared in src/store/write/header.rs, read
--          through apply/header.lua):
--   op          "sum" (add to the total), "gt" / "lt" (keep the best),
--               "latest" (newest event wins)
--   shift       SHIFT (2^tie bits)          max_value  largest |value| allowed
--   desc        true: the high end is best  top_k      members kept per period, 0: all
--               (false on boards with columns: their members order by ascending bytes)
--   dense       true: keep dense indexes    meta       true: keep metadata
--   attempts    max_attempts, 0: no limit
--   rate_events, rate_window  rate limit: events per window (ms) per member, 0: none
--   rate        rate-limit key prefix ("<prefix>:{tag}:_rl:")
--   ttl         dedupe ttl, seconds
--   refused     refusal key prefix ("<prefix>:{tag}:_refused:")
--   seen        dedupe marker hash prefix ("<prefix>:{tag}:_seen:", see markers.lua)
--   offsets, hidden, registry   KEYS indexes of the tag's offsets hash,
--               hidden set and registry of period keys
--   sealed      boards that seal only: KEYS index of the tag's sealed hash
--   fields      the call's partition fields, "<topic>:<partition>"
--   league      league boards: see apply/league.lua (and round, per period)
--   notify, changes  boards with notify_top: N, and the prefix of the
--               remembered changes ("<prefix>:{tag}:_chg:"; see changes.lua)
--   rules       boards with integrity rules: score, gain, jump, better (each
--               with its limits and hold, and on boards ranked by several
--               columns the column it judges), held, queue and gain_key (KEYS
--               indexes), pqueue and hides.prefix (prefixes); see
--               apply/rules.lua and apply/gain.lua
--   cols        boards ranked by several columns: see apply/columns.lua
--               (and rows, per period); op is then "cols"
--   review      a review's call (one admin event): id (the held event's)
--               and approve (else rejected); see apply/decide.lua
--   periods     per period j: a map of KEYS indexes, key (the period key),
--               dense (its dense index), counts (the index's value counts),
--               shadow (hidden players' values), times ("latest": member ->
--               event time), meta (boards with metadata: member -> meta
--               JSON), attempts (max_attempts: member -> events applied),
--               and expire_at (EXPIREAT seconds, 0: none); with notify,
--               id (the period id the changes name); with jump_over,
--               all_time on the all_time period
-- ARGV[2]  the preconditions, a MessagePack array: per field, the last
--          offset the call before this one on the tag carries (-1: none;
--          see offsets.lua)
-- ARGV[3]  the batch (see apply/batch.lua)
--
-- Returns the error LOST, having done nothing, when the tag is not
-- registered (registered.lua); the error STALE, having done nothing, when a
-- precondition does not hold; otherwise E, the microseconds the call took,
-- then (i, code) for each event i not applied, i ascending (codes:
-- decide.lua; a code of an integrity rule is followed by the value that
-- broke it). Every other event was applied (Codes.APPLIED). On boards
-- with notify_top, when any event moved a top (or a redelivered one had),
-- one string follows: the changes (MessagePack, see changes.lua).
--
-- Key names: this script builds none of its own. Every key or key prefix
-- it touches arrives in KEYS or the header, laid out by src/keys.rs; it
-- only appends a member, a marker hash number or a record's position to a
-- prefix it was given.

local started = redis.call('TIME')
local h = Header.read(ARGV[1])
local lost = Registered.check(KEYS[h.offsets])
if lost then return lost end
local offsets = Offsets.open(KEYS[h.offsets], h.fields, h.refused, h.ttl)
local stale = offsets.stale(cmsgpack.unpack(ARGV[2]))
if stale then return stale end

-- A: the call's state, shared by the phases, which run in this order and
-- may each write only what this table gives them (everything else they
-- read; a phase reads nothing a later one writes):
--   here         h (the header, read-only everywhere), np, at, the flags
--                (latest, is_sum, unit, plain, dense_on, meta_on,
--                attempts_on, seal_on), the batch (members, nm, lists,
--                list_len, shapes, shape_len, ne, ids, reader), the KEYS
--                per period (pk, dense_keys, count_keys, shadow_keys,
--                times_keys, meta_keys, att_keys, rows_keys), cols, rounds,
--                trans, pos, redone, dec, decimal, value_name
--   read         sealed, closes, hidden, any_hidden; per period j cur,
--                base, times, base_str, att, att_moved
--   rules        rules (ApplyRules.open, here), its own windows
--   decide       cur, times, att, att_moved (the decided values), rounds,
--                trans, pos, redone (rank changes); moved, metas
--   changes      nothing of A (it returns the changes string)
--   write        nothing of A (it writes Redis from cur, moved, metas)
--   league       nothing of A (it writes Redis from rounds)
local np = #h.periods
local batch = Batch.read(ARGV[3], np)
local A = {
  h = h, np = np, at = Batch.layout(h),
  latest = h.op == 'latest', is_sum = h.op == 'sum',
  unit = h.shift == 1, plain = h.shift == 1 and h.dense,
  dense_on = h.dense, meta_on = h.meta, attempts_on = h.attempts > 0, seal_on = h.sealed ~= nil,
  hidden_key = KEYS[h.hidden], sealed_key = h.sealed and KEYS[h.sealed],
  members = batch.members, nm = batch.nm, lists = batch.lists, list_len = batch.list_len,
  shapes = batch.shapes, shape_len = batch.shape_len, ne = batch.ne, ids = batch.ids,
  reader = batch.reader,
  pk = {}, dense_keys = {}, count_keys = {}, shadow_keys = {}, times_keys = {}, meta_keys = {}, att_keys = {},
  rows_keys = {}, cols = h.cols and ApplyColumns.open(h.cols),
}
for j, p in ipairs(h.periods) do
  A.pk[j], A.dense_keys[j], A.count_keys[j], A.shadow_keys[j] = KEYS[p.key], KEYS[p.dense], KEYS[p.counts], KEYS[p.shadow]
  A.times_keys[j], A.meta_keys[j], A.att_keys[j] = p.times and KEYS[p.times], p.meta and KEYS[p.meta], p.attempts and KEYS[p.attempts]
  A.rows_keys[j] = p.rows and KEYS[p.rows]
end
if h.league then
  A.rounds = {}
  for j, p in ipairs(h.periods) do
    if p.round then A.rounds[j] = { list = {}, seen = {} } end
  end
end
if h.notify then
  A.trans, A.pos, A.redone = {}, {}, {}
  for j = 1, np do A.trans[j], A.trans[-j] = {}, 0 end
end
A.dec, A.decimal = Value.decimals()
A.value_name = Value.namer(h.shift, A.dec)

ApplyRead.run(A)
A.rules = ApplyRules.open(A, started[1] * 1000000 + started[2])
local markers = Markers.open(h.seen, h.ttl)
local out, last_off = ApplyDecide.run(A, offsets, markers)
offsets.record(last_off)
markers.flush()
local changes = A.trans and ApplyChanges.run(A)
ApplyWrite.run(A)
if A.rules then A.rules.flush() end
if A.rounds then ApplyLeague.run(A) end
-- The call's own time in Redis, µs (the worker sizes the tag's calls by it).
local ended = redis.call('TIME')
table.insert(out, 2, (ended[1] - started[1]) * 1000000 + (ended[2] - started[2]))
if changes then out[#out + 1] = changes end
return out
