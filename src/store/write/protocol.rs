//! The apply script's calling convention, kept pure so it is unit tested:
//! how a batch's writes on one board tag become the KEYS and ARGV that
//! `scripts/apply.lua` documents, and how a batch sent behind another waits
//! for it (preconditions); what the script answers is `reply`'s.

use std::sync::Arc;
use std::time::Duration;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::board::{BoardWrite, PeriodWrite, WriteOp, WriteParams};
use crate::event::Event;
use crate::keys;

use super::header::Fields;
use crate::store::conn::msgpack;

/// One event's writes on one tag, borrowed from the batch.
#[derive(Clone, Copy, Debug)]
pub struct ApplyItem<'a> {
    /// `<topic>:<partition>` (see `keys::offsets_field`).
    pub field: &'a str,
    pub offset: i64,
    pub member: &'a str,
    /// `sum`: the delta; `gt`/`lt`: the packed stored score.
    pub num: i64,
    /// `sum`: the tie component packed with the new total.
    pub tie: i64,
    /// Event time, epoch ms.
    pub ts: i64,
    pub event_id: &'a uuid::Uuid,
    pub periods: &'a [Arc<PeriodWrite>],
    /// The event's `meta` (compact JSON); only sent for boards that keep it.
    pub meta: Option<&'a str>,
    /// The record's timestamp, ms; only sent for boards that seal (a period
    /// closed on demand refuses records produced after its close).
    pub record_ts: i64,
    /// Boards with `columns`: the event's value in each, in column order.
    pub values: &'a [i64],
    /// Team boards: a membership event's team (`None`: a score).
    pub team: Option<&'a crate::event::Membership>,
}

/// All of a batch's events for one board tag: one script call.
#[derive(Debug)]
pub struct TagBatch<'a> {
    pub base: &'a str,
    pub params: WriteParams,
    pub items: Vec<ApplyItem<'a>>,
}

/// Adds one event's write on one board to the batch of its board tag,
/// opening a batch for a tag not seen yet; returns the tag's index, so that
/// `tags[t].items` keeps record order.
pub fn push_write<'a>(
    tags: &mut Vec<TagBatch<'a>>,
    write: &'a BoardWrite,
    event: &'a Event,
    field: &'a str,
    offset: i64,
    record_ts: i64,
) -> usize {
    let t = match tags.iter().position(|t| t.base == write.base) {
        Some(t) => t,
        None => {
            tags.push(TagBatch { base: &write.base, params: write.params, items: Vec::new() });
            tags.len() - 1
        }
    };
    tags[t].items.push(ApplyItem {
        field,
        offset,
        member: &event.player_id,
        num: write.num,
        tie: write.tie,
        ts: write.ts,
        event_id: &event.event_id,
        periods: &write.periods,
        meta: event.meta.as_deref(),
        record_ts,
        values: &write.values,
        team: event.team.as_ref(),
    });
    t
}

/// One apply-script call: its KEYS, its header, its preconditions and its
/// batch, as `scripts/apply.lua` documents them.
#[derive(Clone, Debug, PartialEq)]
pub struct Invocation {
    pub keys: Vec<String>,
    /// ARGV[1]: the header, a MessagePack map naming every key (by its
    /// index in `keys`), prefix and setting of the call.
    pub header: Vec<u8>,
    /// ARGV[2]: per partition field, in the header's order, the offset the
    /// tag must have recorded before the call runs (-1: none; see
    /// `Prepared::after`).
    pub needs: Vec<i64>,
    /// ARGV[3]: the batch, one MessagePack stream (see `scripts/apply/batch.lua`).
    pub events: Vec<u8>,
    /// Each partition field of the call, in the header's order, with its last offset.
    pub(in crate::store) tails: Vec<(String, i64)>,
    /// The script it calls.
    pub(in crate::store) script: Script,
}

/// The script an invocation calls: `apply.lua`, or on a team board `team.lua`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::store) enum Script {
    Apply,
    Team,
}

impl Invocation {
    /// The call's last offset of a partition field, if it has the field.
    pub(in crate::store) fn last_offset(&self, field: &str) -> Option<i64> {
        self.tails.iter().find(|(f, _)| f == field).map(|(_, o)| *o)
    }

    /// The `EVALSHA` of this call with `script`.
    pub(in crate::store) fn cmd(&self, script: &redis::Script) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash()).arg(self.keys.len()).arg(&self.keys);
        cmd.arg(&self.header).arg(self.needs_arg()).arg(&self.events);
        cmd
    }

    /// ARGV[2], the preconditions as the script reads them (MessagePack).
    pub(in crate::store) fn needs_arg(&self) -> Vec<u8> {
        let mut needs = Vec::with_capacity(2 + 9 * self.needs.len());
        msgpack::array_len(&mut needs, self.needs.len());
        for n in &self.needs {
            msgpack::int(&mut needs, *n);
        }
        needs
    }
}

/// Lays out one tag batch for the script. Pure, so it is unit tested.
/// (A team board's batch is the team script's: `prepared.rs` sends it to `team.rs`.)
pub fn build_invocation(batch: &TagBatch<'_>, dedupe_ttl_secs: u64) -> Invocation {
    let periods = distinct_periods(batch);
    let (events, fields) = encode_events(batch, &periods);
    let (keys, header) = call_header(batch, &periods, &fields, dedupe_ttl_secs);
    // No preconditions until `Prepared::after` sets them.
    let needs = vec![-1; fields.len()];
    let tails = fields.iter().map(|&(f, last)| (f.to_string(), last)).collect();
    Invocation { keys, header, needs, events, tails, script: Script::Apply }
}

/// The batch's distinct period keys, in the order its events first write them.
fn distinct_periods<'a>(batch: &TagBatch<'a>) -> Vec<&'a PeriodWrite> {
    let mut seen: FxHashSet<&str> = FxHashSet::default();
    let mut periods = Vec::new();
    for item in &batch.items {
        for p in item.periods {
            if seen.insert(p.key.as_str()) {
                periods.push(&**p);
            }
        }
    }
    periods
}

/// KEYS (the offsets hash, the hidden set, the sealed hash on boards that
/// seal, then each period's keys) and the header that names them.
fn call_header(
    batch: &TagBatch<'_>,
    periods: &[&PeriodWrite],
    fields: &[(&str, i64)],
    dedupe_ttl_secs: u64,
) -> (Vec<String>, Vec<u8>) {
    let p = &batch.params;
    let mut keys = Vec::with_capacity(3 + 7 * periods.len());
    // The 1-based index of a key pushed now.
    let push = |keys: &mut Vec<String>, k: String| {
        keys.push(k);
        keys.len() as i64
    };
    let mut h = Fields::new("top");
    h.str("op", p.op.as_str());
    h.int("shift", p.shift);
    h.int("max_value", p.max_value);
    h.bool("desc", p.desc);
    h.int("top_k", p.top_k as i64);
    h.bool("dense", p.dense);
    h.bool("meta", p.meta);
    h.int("attempts", p.attempts as i64);
    h.int("rate_events", p.rate_events as i64);
    h.int("rate_window", p.rate_window_ms);
    h.str("rate", &keys::rate_prefix(batch.base));
    h.int("ttl", dedupe_ttl_secs as i64);
    h.str("refused", &keys::refused_prefix(batch.base));
    h.str("seen", &keys::dedupe_prefix(batch.base));
    h.int("offsets", push(&mut keys, keys::offsets_key(batch.base)));
    h.int("hidden", push(&mut keys, keys::hidden_key(batch.base)));
    h.int("registry", push(&mut keys, keys::registry_key(batch.base)));
    if p.sealed {
        h.int("sealed", push(&mut keys, keys::sealed_key(batch.base)));
    }
    if p.cohort_size > 0 {
        let mut lg = Fields::new("league");
        lg.int("tiers", push(&mut keys, keys::league_tiers_key(batch.base)));
        lg.int("overrides", push(&mut keys, keys::league_overrides_key(batch.base)));
        lg.int("state", push(&mut keys, keys::league_state_key(batch.base)));
        lg.int("registry", push(&mut keys, keys::league_registry_key(batch.base)));
        lg.int("size", i64::from(p.cohort_size));
        lg.int("count", i64::from(p.tiers));
        h.raw("league", &lg.finish());
    }
    if p.notify > 0 {
        h.int("notify", i64::from(p.notify));
        h.str("changes", &keys::changes_prefix(batch.base));
    }
    if p.integrity.any() {
        let held = push(&mut keys, keys::held_key(batch.base));
        let queue = push(&mut keys, keys::held_queue_key(batch.base));
        let gain = push(&mut keys, keys::gain_key(batch.base));
        let rows = p.columns.is_some();
        h.raw("rules", &crate::store::write::rules::rules_header(&p.integrity, rows, batch.base, (held, queue, gain)));
    }
    if let Some(c) = p.columns {
        h.raw("cols", &columns_header(&c));
    }
    if let Some(review) = p.review {
        let mut r = Fields::new("review");
        r.str("id", &review.held.to_string());
        r.bool("approve", review.approve);
        r.bool("early", review.early);
        h.raw("review", &r.finish());
    }
    let mut list = Vec::new();
    msgpack::array_len(&mut list, fields.len());
    for (f, _) in fields {
        msgpack::str(&mut list, f);
    }
    h.raw("fields", &list);
    list.clear();
    msgpack::array_len(&mut list, periods.len());
    for period in periods {
        let mut m = Fields::new("period");
        m.int("key", push(&mut keys, period.key.clone()));
        m.int("dense", push(&mut keys, period.dense_key.clone()));
        m.int("counts", push(&mut keys, period.count_key.clone()));
        m.int("shadow", push(&mut keys, period.shadow_key.clone()));
        if p.op == WriteOp::Latest {
            m.int("times", push(&mut keys, period.times_key.clone()));
        }
        if p.meta {
            m.int("meta", push(&mut keys, period.meta_key.clone()));
        }
        if p.attempts > 0 {
            m.int("attempts", push(&mut keys, period.attempts_key.clone()));
        }
        if p.columns.is_some() {
            m.int("rows", push(&mut keys, period.rows_key.clone()));
        }
        m.int("expire_at", period.expire_at.unwrap_or(0));
        if p.integrity.jump_over.is_some() && period.id == "all" {
            m.bool("all_time", true);
        }
        if p.notify > 0 {
            m.str("id", &period.id);
        }
        if let (Some(r), true) = (&period.round, p.cohort_size > 0) {
            let mut rm = Fields::new("round");
            rm.int("cohorts", push(&mut keys, r.cohorts.clone()));
            rm.int("open", push(&mut keys, r.open.clone()));
            rm.int("pending", push(&mut keys, r.pending.clone()));
            if let Some((id, cohorts, pending)) = &r.previous {
                rm.str("prev", id);
                rm.int("prev_cohorts", push(&mut keys, cohorts.clone()));
                rm.int("prev_pending", push(&mut keys, pending.clone()));
            }
            m.raw("round", &rm.finish());
        }
        list.extend_from_slice(&m.finish());
    }
    h.raw("periods", &list);
    (keys, h.finish())
}

/// The header's `cols`: n, per column desc and mode, best (`row =
/// "best"`) and earliest (tie keys).
fn columns_header(c: &crate::board::columns::ColumnSpec) -> Vec<u8> {
    let n = c.n as usize;
    let mut m = Fields::new("cols");
    m.int("n", n as i64);
    let mut list = Vec::new();
    msgpack::array_len(&mut list, n);
    for &d in &c.desc[..n] {
        msgpack::int(&mut list, i64::from(d));
    }
    m.raw("desc", &list);
    list.clear();
    msgpack::array_len(&mut list, n);
    for mode in &c.modes[..n] {
        msgpack::str(&mut list, mode.as_str());
    }
    m.raw("modes", &list);
    m.bool("best", c.best_row);
    m.bool("earliest", c.earliest);
    m.finish()
}

/// The batch as one MessagePack stream (its layout is in apply.lua's
/// header), and the partition fields it names with each one's last offset.
/// The batch's distinct members, per period key the distinct members
/// written to it, and the distinct lists of period keys the events write
/// (shapes) go first, so that the script keeps its state in tables indexed
/// by number.
fn encode_events<'a>(batch: &TagBatch<'a>, periods: &[&PeriodWrite]) -> (Vec<u8>, Vec<(&'a str, i64)>) {
    let p = &batch.params;
    let period_index: FxHashMap<&str, usize> =
        periods.iter().enumerate().map(|(j, period)| (period.key.as_str(), j + 1)).collect();
    let mut member_index: FxHashMap<&str, usize> =
        FxHashMap::with_capacity_and_hasher(batch.items.len(), Default::default());
    let mut members: Vec<&str> = Vec::with_capacity(batch.items.len());
    let mut per_period: Vec<Vec<usize>> = vec![Vec::new(); periods.len()];
    // (period key, member) pairs already in per_period.
    let mut listed: FxHashSet<(usize, usize)> = FxHashSet::default();
    let mut fields: Vec<(&str, i64)> = Vec::new();
    // A batch's events write a handful of distinct period lists at most.
    let mut shapes: Vec<Vec<usize>> = Vec::new();
    let mut shape: Vec<usize> = Vec::new();
    let with_tie = p.op == WriteOp::Sum && p.shift > 1;
    let with_rules = p.integrity.any();
    let with_ts = p.op == WriteOp::Latest || p.rate_events > 0 || with_rules || p.columns.is_some();
    let mut body = Vec::with_capacity(batch.items.len() * 16);
    for item in &batch.items {
        let f = field_index(&mut fields, item.field, item.offset);
        let m = *member_index.entry(item.member).or_insert_with(|| {
            members.push(item.member);
            members.len()
        });
        shape.clear();
        shape.extend(item.periods.iter().map(|period| period_index[period.key.as_str()]));
        let sh = match shapes.iter().position(|s| *s == shape) {
            Some(sh) => sh + 1,
            None => {
                shapes.push(shape.clone());
                shapes.len()
            }
        };
        for n in [f as i64 + 1, item.offset, m as i64, item.num, sh as i64] {
            msgpack::int(&mut body, n);
        }
        if with_tie {
            msgpack::int(&mut body, item.tie);
        }
        if with_ts {
            msgpack::int(&mut body, item.ts);
        }
        if p.meta {
            msgpack::str(&mut body, item.meta.unwrap_or(""));
        }
        if p.sealed {
            msgpack::int(&mut body, item.record_ts);
        }
        if with_rules {
            msgpack::str(&mut body, &item.event_id.to_string());
        }
        if let Some(c) = p.columns {
            for i in 0..c.n as usize {
                msgpack::int(&mut body, item.values.get(i).copied().unwrap_or(0));
            }
            msgpack::bytes_as_str(&mut body, &c.stored_row(item.values, item.ts));
        }
        for &j in &shape {
            if listed.insert((j, m)) {
                per_period[j - 1].push(m);
            }
        }
    }
    let mut events = Vec::with_capacity(body.len() + 16 * members.len() + 16);
    msgpack::int(&mut events, members.len() as i64);
    for m in &members {
        msgpack::str(&mut events, m);
    }
    for list in &per_period {
        // Every member, in order (each member's first event wrote the
        // key): -1 stands for the list, which the script then need not read.
        if list.len() == members.len() && list.iter().enumerate().all(|(i, &m)| m == i + 1) {
            msgpack::int(&mut events, -1);
            continue;
        }
        msgpack::int(&mut events, list.len() as i64);
        for m in list {
            msgpack::int(&mut events, *m as i64);
        }
    }
    msgpack::int(&mut events, shapes.len() as i64);
    for shape in &shapes {
        msgpack::int(&mut events, shape.len() as i64);
        for &j in shape {
            msgpack::int(&mut events, j as i64);
        }
    }
    msgpack::int(&mut events, batch.items.len() as i64);
    for item in &batch.items {
        msgpack::bytes_as_str(&mut events, &crate::markers::marker(item.event_id));
    }
    events.extend_from_slice(&body);
    (events, fields)
}

/// The index of partition `field` in a call's `fields` (added when new),
/// each with the call's last offset of it, raised to `offset`.
pub(super) fn field_index<'a>(fields: &mut Vec<(&'a str, i64)>, field: &'a str, offset: i64) -> usize {
    let f = match fields.iter().position(|(f, _)| *f == field) {
        Some(f) => f,
        None => {
            fields.push((field, offset));
            fields.len() - 1
        }
    };
    fields[f].1 = fields[f].1.max(offset);
    f
}

/// The apply script's `dedupe_ttl`: whole seconds, rounded up, so that an
/// event id stays a duplicate at least as long as configured.
pub(in crate::store) fn ttl_secs(ttl: Duration) -> u64 {
    (ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)).max(1)
}

#[cfg(test)]
pub(in crate::store) mod tests {
    use super::*;

    pub(crate) fn pw(period: &str, expire_at: Option<i64>) -> Arc<PeriodWrite> {
        Arc::new(PeriodWrite {
            id: period.to_string(),
            key: keys::period_key("lb:{p}", period),
            dense_key: keys::dense_key("lb:{p}", period),
            count_key: keys::dense_count_key("lb:{p}", period),
            times_key: keys::times_key("lb:{p}", period),
            meta_key: keys::meta_key("lb:{p}", period),
            shadow_key: keys::shadow_key("lb:{p}", period),
            attempts_key: keys::attempts_key("lb:{p}", period),
            rows_key: keys::rows_key("lb:{p}", period),
            expire_at,
            close_at: None,
            round: None,
        })
    }

    /// Two events on one tag: alice's writes a day and all time, bob's all time only.
    pub(crate) fn two_event_invocation() -> Invocation {
        let id1 = uuid::Uuid::from_u128(1);
        let id2 = uuid::Uuid::from_u128(2);
        let k1 = vec![pw("d:2026-08-14", Some(100)), pw("all", None)];
        let k2 = vec![pw("all", None)];
        let batch = TagBatch {
            base: "lb:{p}",
            params: WriteParams::plain_sum(),
            items: vec![
                ApplyItem {
                    field: "t:0",
                    offset: 7,
                    member: "alice",
                    num: 5,
                    tie: 0,
                    ts: 1,
                    event_id: &id1,
                    periods: &k1,
                    meta: None,
                    record_ts: 0,
                    values: &[],
                    team: None,
                },
                ApplyItem {
                    field: "t:1",
                    offset: 9,
                    member: "bob",
                    num: -3,
                    tie: 0,
                    ts: 2,
                    event_id: &id2,
                    periods: &k2,
                    meta: None,
                    record_ts: 0,
                    values: &[],
                    team: None,
                },
            ],
        };
        build_invocation(&batch, 60)
    }

    #[test]
    fn the_dedupe_ttl_goes_to_the_script_in_whole_seconds_rounded_up() {
        assert_eq!(ttl_secs(Duration::from_secs(604_800)), 604_800);
        assert_eq!(ttl_secs(Duration::from_millis(1_500)), 2);
        assert_eq!(ttl_secs(Duration::from_millis(1)), 1);
        assert_eq!(ttl_secs(Duration::ZERO), 1);
    }

    #[test]
    fn invocations_share_period_keys_and_index_them_from_one() {
        let inv = two_event_invocation();
        assert_eq!(
            inv.keys,
            [
                "lb:{p}:_offsets",
                "lb:{p}:_hidden",
                "lb:{p}:_keys",
                "lb:{p}:d:2026-08-14",
                "lb:{p}:_dense:d:2026-08-14",
                "lb:{p}:_dcount:d:2026-08-14",
                "lb:{p}:_hid:d:2026-08-14",
                "lb:{p}:all",
                "lb:{p}:_dense:all",
                "lb:{p}:_dcount:all",
                "lb:{p}:_hid:all",
            ]
        );
        // The header names each key by its index in KEYS.
        assert_eq!(
            msgpack::render(&mut inv.header.as_slice()),
            "{op: sum, shift: 1, max_value: 1000, desc: true, top_k: 0, dense: true, meta: false, attempts: 0, \
             rate_events: 0, rate_window: 0, rate: lb:{p}:_rl:, ttl: 60, refused: lb:{p}:_refused:, \
             seen: lb:{p}:_seen:, offsets: 1, hidden: 2, registry: 3, fields: [t:0, t:1], \
             periods: [{key: 4, dense: 5, counts: 6, shadow: 7, expire_at: 100}, \
             {key: 8, dense: 9, counts: 10, shadow: 11, expire_at: 0}]}"
        );
        assert_eq!(inv.needs, [-1, -1]);
        let events = &inv.events;
        // The members; per period key its members' indexes (-1: all of them, in
        // order); the shapes; then
        // the events: field index, offset, member index, num, shape (a sum
        // without a tie-break and without a rate limit sends no tie or time).
        let mut rd = events.as_slice();
        let mut got = Vec::new();
        while !rd.is_empty() {
            let mut buf = [0u8; 64];
            let mut peek = rd;
            match rmp::decode::read_int::<i64, _>(&mut peek) {
                Ok(n) => {
                    rd = peek;
                    got.push(n.to_string());
                }
                Err(_) if rd[0] == 0xa0 | crate::markers::BYTES as u8 => {
                    // An event's marker: a str of its bytes, told by the event id it was made of.
                    let len = rmp::decode::read_str_len(&mut rd).unwrap() as usize;
                    let marker: crate::markers::Marker = rd[..len].try_into().unwrap();
                    let id =
                        [1, 2].map(uuid::Uuid::from_u128).into_iter().find(|id| crate::markers::marker(id) == marker);
                    got.push(id.expect("the marker of an event of the batch").to_string());
                    rd = &rd[len..];
                }
                Err(_) => got.push(rmp::decode::read_str(&mut rd, &mut buf).unwrap().to_string()),
            }
        }
        assert!(rd.is_empty());
        #[rustfmt::skip]
        let want = [
            "2", "alice", "bob", // members
            "1", "1",  // period key 1: alice
            "-1", // period key 2: every member in order (alice, bob)
            "2", "2", "1", "2", "1", "2", // shapes: keys 1 and 2; key 2
            "2", // events
            "00000000-0000-0000-0000-000000000001", // their markers' ids
            "00000000-0000-0000-0000-000000000002",
            "1", "7", "1", "5", "1", // alice's event, shape 1
            "2", "9", "2", "-3", "2", // bob's event, shape 2
        ];
        assert_eq!(got, want);
    }
}
