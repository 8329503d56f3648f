//! The apply script's calling convention, kept pure so it is unit tested:
//! how a batch's writes on one board tag become the KEYS and ARGV that
//! `scripts/apply.lua` documents, how a batch sent behind another waits for
//! it (preconditions), and what the script's reply means.

use std::sync::Arc;
use std::time::Duration;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::board::{BoardWrite, PeriodWrite, WriteOp, WriteParams};
use crate::event::Event;
use crate::keys;

/// What the apply script did with one event on one board tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplyResult {
    Applied,
    /// The `event_id` marker was already set: a producer retry.
    DuplicateEvent,
    /// The record's offset was already applied on this tag: a redelivery.
    DuplicateOffset,
    /// The script refused the event; the code maps to an `event::Reason`.
    Refused(i64),
}

impl ApplyResult {
    pub(super) fn from_code(code: i64) -> ApplyResult {
        match code {
            1 => ApplyResult::Applied,
            2 => ApplyResult::DuplicateEvent,
            3 => ApplyResult::DuplicateOffset,
            other => ApplyResult::Refused(other),
        }
    }
}

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
    });
    t
}

/// One script call of a prepared batch.
pub(super) struct Call {
    /// Which of the batch's tag batches its events are from.
    pub(super) batch: usize,
    pub(super) base: String,
    pub(super) inv: Invocation,
    /// How many events it carries.
    pub(super) n: usize,
    /// Per partition field of the call: whether its precondition is on an
    /// earlier call of the same batch and tag (a tag's events split over
    /// several calls), which always holds once that call has run, rather
    /// than on the batch before (see [`Prepared::after`]).
    pub(super) chained: Vec<bool>,
}

/// A batch's encoded script calls: each tag's events in calls of at most
/// `max_events` events, a tag's calls one after the other.
pub struct Prepared {
    pub(super) calls: Vec<Call>,
}

/// Encodes a batch's calls. A tag with more than `max_events` events gets
/// several calls, so that no call holds Redis for long (reads get in
/// between); each later call waits, with a precondition, for the offsets
/// of the call before it on the tag, so that they apply in order even when
/// one of them must be sent again.
pub fn prepare(batches: &[TagBatch<'_>], dedupe_ttl_secs: u64, max_events: usize) -> Prepared {
    let mut calls: Vec<Call> = Vec::new();
    for (b, batch) in batches.iter().enumerate() {
        let first = calls.len();
        for items in batch.items.chunks(max_events.max(1)) {
            let part = TagBatch { base: batch.base, params: batch.params, items: items.to_vec() };
            let mut inv = build_invocation(&part, dedupe_ttl_secs);
            let mut chained = vec![false; inv.tails.len()];
            for (f, (field, _)) in inv.tails.iter().enumerate() {
                let earlier = calls[first..].iter().rev().find_map(|c| c.inv.last_offset(field));
                if let Some(last) = earlier {
                    inv.args[inv.need_at + f] = last.to_string().into_bytes();
                    chained[f] = true;
                }
            }
            calls.push(Call { batch: b, base: batch.base.to_string(), inv, n: items.len(), chained });
        }
    }
    Prepared { calls }
}

impl Prepared {
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Where this batch leaves each board tag: per tag, each partition
    /// field's last offset, which a batch sent behind it waits for.
    pub fn tails(&self) -> Tails {
        let mut out: Vec<(String, Vec<(String, i64)>)> = Vec::new();
        for c in &self.calls {
            let t = match out.iter().position(|(b, _)| *b == c.base) {
                Some(t) => t,
                None => {
                    out.push((c.base.clone(), Vec::new()));
                    out.len() - 1
                }
            };
            // A tag's later calls carry its later offsets.
            for (field, last) in &c.inv.tails {
                match out[t].1.iter_mut().find(|(g, _)| g == field) {
                    Some(e) => e.1 = *last,
                    None => out[t].1.push((field.clone(), *last)),
                }
            }
        }
        Tails(out)
    }

    /// Lets these calls be sent while the batch that left `before` is still
    /// on its way to Redis: each call then runs only if its tag has recorded
    /// the offsets that batch carries for the same partitions, and otherwise
    /// fails with `STALE` having done nothing (see apply.lua). Without this,
    /// a later batch applied ahead of a failed one would make the failed
    /// one's events look redelivered when it is retried.
    pub fn after(&mut self, before: &Tails) {
        for c in &mut self.calls {
            let Some((_, tails)) = before.0.iter().find(|(b, _)| *b == c.base) else { continue };
            for (f, (field, _)) in c.inv.tails.iter().enumerate() {
                if c.chained[f] {
                    continue;
                }
                if let Some((_, last)) = tails.iter().find(|(g, _)| g == field) {
                    c.inv.args[c.inv.need_at + f] = last.to_string().into_bytes();
                }
            }
        }
    }

    /// Drops the preconditions [`Prepared::after`] set. Once the batch
    /// before has landed they hold, unless Redis has lost its offsets (a
    /// restart without persistence): then the calls must run all the same.
    /// The preconditions between a tag's calls stay: the calls are sent
    /// again together (see `Store::apply_pending`).
    pub fn unconditional(&mut self) {
        for c in &mut self.calls {
            for f in 0..c.inv.tails.len() {
                if !c.chained[f] {
                    c.inv.args[c.inv.need_at + f] = b"-1".to_vec();
                }
            }
        }
    }

    /// The calls to send while `landed` says which have landed: those that
    /// have not, and, before each, the calls of its tag it is chained to
    /// that have (sent again, they change nothing unless Redis lost them,
    /// and then they restore what the pending call's precondition needs).
    pub(super) fn to_send(&self, landed: &[bool]) -> Vec<usize> {
        let pending = |i: usize| !landed[i];
        (0..self.calls.len())
            .filter(|&i| {
                pending(i)
                    || (i + 1..self.calls.len()).take_while(|&j| self.calls[j].base == self.calls[i].base).any(pending)
            })
            .collect()
    }
}

/// Per board tag, each partition field's last offset in a batch (see [`Prepared::tails`]).
#[derive(Clone, Debug, Default)]
pub struct Tails(Vec<(String, Vec<(String, i64)>)>);

/// KEYS and ARGV of one apply-script call, as `scripts/apply.lua` documents them.
#[derive(Debug, PartialEq)]
pub struct Invocation {
    pub keys: Vec<String>,
    /// Strings, then the batch as one MessagePack stream (see apply.lua).
    pub args: Vec<Vec<u8>>,
    /// Each partition field of the call, in ARGV order, with its last offset.
    tails: Vec<(String, i64)>,
    /// Where in `args` the fields' preconditions start.
    need_at: usize,
}

impl Invocation {
    /// The call's last offset of a partition field, if it has the field.
    fn last_offset(&self, field: &str) -> Option<i64> {
        self.tails.iter().find(|(f, _)| f == field).map(|(_, o)| *o)
    }
}

/// Lays out one tag batch for the script. Pure, so it is unit tested.
pub fn build_invocation(batch: &TagBatch<'_>, dedupe_ttl_secs: u64) -> Invocation {
    let periods = distinct_periods(batch);
    let keys = call_keys(batch, &periods);
    let mut args = constant_args(batch, &periods, dedupe_ttl_secs);
    let (events, fields) = encode_events(batch, &periods);
    args.push(fields.len().to_string().into_bytes());
    args.extend(fields.iter().map(|(f, _)| f.as_bytes().to_vec()));
    // No preconditions until `Prepared::after` sets them.
    let need_at = args.len();
    args.extend(fields.iter().map(|_| b"-1".to_vec()));
    args.push(events);
    let tails = fields.iter().map(|&(f, last)| (f.to_string(), last)).collect();
    Invocation { keys, args, tails, need_at }
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

/// KEYS: the offsets hash, each period key with its dense index, value
/// counts and (`latest`) event times, and the sealed hash.
fn call_keys(batch: &TagBatch<'_>, periods: &[&PeriodWrite]) -> Vec<String> {
    let p = &batch.params;
    let mut keys = Vec::with_capacity(2 + 4 * periods.len());
    keys.push(keys::offsets_key(batch.base));
    keys.extend(periods.iter().map(|p| p.key.clone()));
    keys.extend(periods.iter().map(|p| p.dense_key.clone()));
    keys.extend(periods.iter().map(|p| p.count_key.clone()));
    if p.op == WriteOp::Latest {
        keys.extend(periods.iter().map(|p| p.times_key.clone()));
    }
    if p.sealed {
        keys.push(keys::sealed_key(batch.base));
    }
    keys
}

/// ARGV[1] to ARGV[13 + P]: the board's constants, the key prefixes the
/// script extends, and each period key's expiry.
fn constant_args(batch: &TagBatch<'_>, periods: &[&PeriodWrite], dedupe_ttl_secs: u64) -> Vec<Vec<u8>> {
    let p = &batch.params;
    let flag = |on: bool| if on { "1" } else { "0" }.to_string();
    let mut args: Vec<String> = vec![
        p.op.as_str().to_string(),
        dedupe_ttl_secs.to_string(),
        keys::refused_prefix(batch.base),
        p.shift.to_string(),
        p.max_value.to_string(),
        if p.desc { "desc" } else { "asc" }.to_string(),
        p.top_k.to_string(),
        p.rate_events.to_string(),
        p.rate_window_ms.to_string(),
        keys::rate_prefix(batch.base),
        flag(p.dense),
        flag(p.sealed),
        keys::dedupe_prefix(batch.base),
        keys::registry_key(batch.base),
        periods.len().to_string(),
    ];
    args.extend(periods.iter().map(|period| period.expire_at.unwrap_or(0).to_string()));
    args.into_iter().map(String::into_bytes).collect()
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
    let with_ts = p.op == WriteOp::Latest || p.rate_events > 0;
    let mut body = Vec::with_capacity(batch.items.len() * 16);
    for item in &batch.items {
        let f = match fields.iter().position(|(f, _)| *f == item.field) {
            Some(f) => f,
            None => {
                fields.push((item.field, item.offset));
                fields.len() - 1
            }
        };
        fields[f].1 = fields[f].1.max(item.offset);
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
            mp_int(&mut body, n);
        }
        if with_tie {
            mp_int(&mut body, item.tie);
        }
        if with_ts {
            mp_int(&mut body, item.ts);
        }
        for &j in &shape {
            if listed.insert((j, m)) {
                per_period[j - 1].push(m);
            }
        }
    }
    let mut events = Vec::with_capacity(body.len() + 16 * members.len() + 16);
    mp_int(&mut events, members.len() as i64);
    for m in &members {
        rmp::encode::write_str(&mut events, m).expect("writing to a Vec cannot fail");
    }
    for list in &per_period {
        // Every member, in order (each member's first event wrote the
        // key): -1 stands for the list, which the script then need not read.
        if list.len() == members.len() && list.iter().enumerate().all(|(i, &m)| m == i + 1) {
            mp_int(&mut events, -1);
            continue;
        }
        mp_int(&mut events, list.len() as i64);
        for m in list {
            mp_int(&mut events, *m as i64);
        }
    }
    mp_int(&mut events, shapes.len() as i64);
    for shape in &shapes {
        mp_int(&mut events, shape.len() as i64);
        for &j in shape {
            mp_int(&mut events, j as i64);
        }
    }
    mp_int(&mut events, batch.items.len() as i64);
    for item in &batch.items {
        // A str of the id's 16 bytes: Redis's cmsgpack reads no bin formats.
        rmp::encode::write_str_len(&mut events, 16).expect("writing to a Vec cannot fail");
        events.extend_from_slice(item.event_id.as_bytes());
    }
    events.extend_from_slice(&body);
    (events, fields)
}

/// The apply script's reply: the number of events it saw, then (event
/// number, code) for each event not applied. `None` if it does not describe
/// `n` events.
pub(super) fn decode_reply(reply: &[i64], n: usize) -> Option<Vec<ApplyResult>> {
    let (&seen, rest) = reply.split_first()?;
    if seen != n as i64 || rest.len() % 2 != 0 {
        return None;
    }
    let mut out = vec![ApplyResult::Applied; n];
    for pair in rest.chunks_exact(2) {
        let i = usize::try_from(pair[0]).ok().filter(|i| (1..=n).contains(i))?;
        out[i - 1] = ApplyResult::from_code(pair[1]);
    }
    Some(out)
}

/// The apply script's `dedupe_ttl`: whole seconds, rounded up, so that an
/// event id stays a duplicate at least as long as configured.
pub(super) fn ttl_secs(ttl: Duration) -> u64 {
    (ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)).max(1)
}

fn mp_int(buf: &mut Vec<u8>, n: i64) {
    rmp::encode::write_sint(buf, n).expect("writing to a Vec cannot fail");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pw(period: &str, expire_at: Option<i64>) -> Arc<PeriodWrite> {
        Arc::new(PeriodWrite {
            id: period.to_string(),
            key: keys::period_key("lb:{p}", period),
            dense_key: keys::dense_key("lb:{p}", period),
            count_key: keys::dense_count_key("lb:{p}", period),
            times_key: keys::times_key("lb:{p}", period),
            expire_at,
            close_at: None,
        })
    }

    #[test]
    fn the_dedupe_ttl_goes_to_the_script_in_whole_seconds_rounded_up() {
        assert_eq!(ttl_secs(Duration::from_secs(604_800)), 604_800);
        assert_eq!(ttl_secs(Duration::from_millis(1_500)), 2);
        assert_eq!(ttl_secs(Duration::from_millis(1)), 1);
        assert_eq!(ttl_secs(Duration::ZERO), 1);
    }

    #[test]
    fn a_reply_lists_the_events_not_applied_and_must_count_them_all() {
        let got = decode_reply(&[3, 2, 2, 3, 4], 3).unwrap();
        assert_eq!(got, [ApplyResult::Applied, ApplyResult::DuplicateEvent, ApplyResult::Refused(4)]);
        assert_eq!(decode_reply(&[2], 2).unwrap(), [ApplyResult::Applied; 2]);
        // A reply for another number of events, a pair cut short, an event
        // number out of range: the batch fails and is retried, nothing is guessed.
        assert!(decode_reply(&[2], 3).is_none());
        assert!(decode_reply(&[3, 2], 3).is_none());
        assert!(decode_reply(&[3, 4, 2], 3).is_none());
        assert!(decode_reply(&[3, 0, 2], 3).is_none());
        assert!(decode_reply(&[], 0).is_none());
    }

    /// Two events on one tag: alice's writes a day and all time, bob's all time only.
    fn two_event_invocation() -> Invocation {
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
                },
            ],
        };
        build_invocation(&batch, 60)
    }

    #[test]
    fn invocations_share_period_keys_and_index_them_from_one() {
        let inv = two_event_invocation();
        assert_eq!(
            inv.keys,
            [
                "lb:{p}:_offsets",
                "lb:{p}:d:2026-08-14",
                "lb:{p}:all",
                "lb:{p}:_dense:d:2026-08-14",
                "lb:{p}:_dense:all",
                "lb:{p}:_dcount:d:2026-08-14",
                "lb:{p}:_dcount:all"
            ]
        );
        let (events, head) = inv.args.split_last().unwrap();
        let head: Vec<&str> = head.iter().map(|a| std::str::from_utf8(a).unwrap()).collect();
        assert_eq!(
            head,
            [
                "sum",
                "60",
                "lb:{p}:_refused:",
                "1",
                "1000",
                "desc",
                "0",
                "0",
                "0",
                "lb:{p}:_rl:",
                "1",
                "0",
                "lb:{p}:_seen:",
                "lb:{p}:_keys",
                "2",
                "100",
                "0",
                "2",
                "t:0",
                "t:1",
                "-1",
                "-1"
            ]
        );
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
                Err(_) if rd[0] == 0xb0 => {
                    // An event id: a str of its 16 bytes.
                    let len = rmp::decode::read_str_len(&mut rd).unwrap() as usize;
                    got.push(uuid::Uuid::from_slice(&rd[..len]).unwrap().to_string());
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
            "00000000-0000-0000-0000-000000000001", // their ids
            "00000000-0000-0000-0000-000000000002",
            "1", "7", "1", "5", "1", // alice's event, shape 1
            "2", "9", "2", "-3", "2", // bob's event, shape 2
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn a_call_sent_behind_another_waits_for_its_last_offset_of_each_shared_partition() {
        // Sent behind a batch still in flight, the call waits for that
        // batch's last offset of each partition it shares on the same tag.
        let inv = two_event_invocation();
        let mut next =
            Prepared { calls: vec![Call { batch: 0, base: "lb:{p}".to_string(), inv, n: 2, chained: vec![false; 2] }] };
        let before = Tails(vec![
            ("lb:{other}".to_string(), vec![("t:1".to_string(), 50)]),
            ("lb:{p}".to_string(), vec![("t:1".to_string(), 8), ("t:2".to_string(), 3)]),
        ]);
        let needs = |p: &Prepared| -> Vec<String> {
            let inv = &p.calls[0].inv;
            inv.args[inv.need_at..inv.need_at + 2].iter().map(|a| String::from_utf8(a.clone()).unwrap()).collect()
        };
        next.after(&before);
        assert_eq!(needs(&next), ["-1", "8"]);
        next.unconditional();
        assert_eq!(needs(&next), ["-1", "-1"]);
        // Its own tails: each partition's last offset in the call.
        assert_eq!(next.tails().0, [("lb:{p}".to_string(), vec![("t:0".to_string(), 7), ("t:1".to_string(), 9)])]);
    }

    #[test]
    fn a_tag_with_more_events_than_a_call_takes_gets_calls_chained_on_each_other() {
        let ids: Vec<uuid::Uuid> = (1..=5).map(uuid::Uuid::from_u128).collect();
        let k = vec![pw("all", None)];
        let at = [("t:0", 1), ("t:1", 10), ("t:0", 2), ("t:0", 3), ("t:1", 11)];
        let items = at
            .iter()
            .zip(&ids)
            .map(|(&(field, offset), id)| ApplyItem {
                field,
                offset,
                member: "alice",
                num: 1,
                tie: 0,
                ts: 1,
                event_id: id,
                periods: &k,
            })
            .collect();
        let batch = TagBatch { base: "lb:{p}", params: WriteParams::plain_sum(), items };
        let mut p = prepare(&[batch], 60, 2);
        let needs = |p: &Prepared, i: usize| -> Vec<(String, String)> {
            let inv = &p.calls[i].inv;
            inv.tails
                .iter()
                .enumerate()
                .map(|(f, (field, _))| (field.clone(), String::from_utf8(inv.args[inv.need_at + f].clone()).unwrap()))
                .collect()
        };
        assert_eq!(p.calls.iter().map(|c| c.n).collect::<Vec<_>>(), [2, 2, 1]);
        // Each later call waits for the offsets the calls before it on the tag carry.
        let pair = |f: &str, n: &str| (f.to_string(), n.to_string());
        assert_eq!(needs(&p, 0), [pair("t:0", "-1"), pair("t:1", "-1")]);
        assert_eq!(needs(&p, 1), [pair("t:0", "1")]);
        assert_eq!(needs(&p, 2), [pair("t:1", "10")]);
        // Behind another batch, only the first call's fields wait for it, and
        // dropping those preconditions keeps the chain.
        p.after(&Tails(vec![("lb:{p}".to_string(), vec![("t:0".to_string(), 0), ("t:1".to_string(), 9)])]));
        assert_eq!(needs(&p, 0), [pair("t:0", "0"), pair("t:1", "9")]);
        assert_eq!(needs(&p, 1), [pair("t:0", "1")]);
        p.unconditional();
        assert_eq!(needs(&p, 0), [pair("t:0", "-1"), pair("t:1", "-1")]);
        assert_eq!(needs(&p, 2), [pair("t:1", "10")]);
        // The tag's tails are its last offsets over all its calls.
        assert_eq!(p.tails().0, [("lb:{p}".to_string(), vec![("t:0".to_string(), 3), ("t:1".to_string(), 11)])]);
        // Sent again: a pending call goes with the landed calls of its tag before it.
        assert_eq!(p.to_send(&[true, false, true]), [0, 1]);
        assert_eq!(p.to_send(&[true, true, false]), [0, 1, 2]);
        assert_eq!(p.to_send(&[true, true, true]), Vec::<usize>::new());
    }
}
