//! Boards ranked by several columns in the apply script, against a real
//! redis-server and the model in `board::columns`: random streams with
//! ties through every column, values at the range's ends, producer
//! retries and redeliveries, on two- and five-column boards in both row
//! modes; every period key's members, byte for byte and in order, and
//! every event's outcome, as the model has them.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use rankflow::board::columns::{Column, ColumnMode, Columns, Combined, Row, RowMode};
use rankflow::board::{Order, PeriodWrite, WriteOp, WriteParams};
use rankflow::event::Reason;
use rankflow::store::{ApplyItem, ApplyResult, Reader, RowEntry, RowsAt, Store, TagBatch};
use support::apply::{period_write, reader, row_item, store_with_ttl, MAX};
use support::Redis;
use uuid::Uuid;

const BASE: &str = "lb:{c}";

/// A small deterministic generator (xorshift), so a failure reproduces.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A value: mostly a few small ones (ties), sometimes a range end.
    fn value(&mut self) -> i64 {
        match self.below(40) {
            0 => MAX,
            1 => -MAX,
            2 => MAX - 1,
            3 => -(MAX - 1),
            _ => self.below(5) as i64 - 2,
        }
    }
}

fn board(specs: &[(ColumnMode, Order)], row: RowMode) -> Columns {
    let list = specs.iter().enumerate().map(|(i, &(mode, order))| Column::new(format!("c{i}"), mode, order)).collect();
    Columns { list, row }
}

fn params(c: &Columns, earliest: bool) -> WriteParams {
    let mut p = WriteParams::plain(WriteOp::Columns, 1, MAX);
    p.dense = false;
    p.columns = Some(c.spec(earliest));
    p
}

/// One event of the stream.
struct Ev {
    offset: i64,
    member: String,
    id: Uuid,
    ts: i64,
    values: Vec<i64>,
    /// Index into the period lists: the day it falls on.
    day: usize,
}

/// The model: rows per period id, the ids applied.
#[derive(Default)]
struct Model {
    periods: BTreeMap<String, BTreeMap<String, Row>>,
    applied: HashSet<Uuid>,
}

impl Model {
    /// What the script must answer for `e`, writing `ids` (period ids).
    fn apply(&mut self, c: &Columns, e: &Ev, ids: &[&str]) -> ApplyResult {
        if self.applied.contains(&e.id) {
            return ApplyResult::DuplicateEvent;
        }
        // Every period takes the event, or none does.
        let mut next = Vec::new();
        for id in ids {
            let mut row = self.periods.get(*id).and_then(|p| p.get(&e.member)).cloned();
            if let Combined::OutOfRange(_) = c.combine(&mut row, &e.values, e.ts) {
                return ApplyResult::Refused(Reason::ScoreOutOfRange.script_code().unwrap());
            }
            next.push((id.to_string(), row.expect("a row")));
        }
        for (id, row) in next {
            self.periods.entry(id).or_default().insert(e.member.clone(), row);
        }
        self.applied.insert(e.id);
        ApplyResult::Applied
    }

    /// Period `id`'s members as the sorted set must hold them, in order.
    fn members(&self, c: &Columns, earliest: bool, id: &str) -> Vec<Vec<u8>> {
        let spec = c.spec(earliest);
        let mut rows: Vec<(&String, &Row)> = self.periods.get(id).map(|p| p.iter().collect()).unwrap_or_default();
        rows.sort_by(|(pa, a), (pb, b)| {
            c.better(&a.values, &b.values)
                .then_with(|| if earliest { a.reached.cmp(&b.reached) } else { std::cmp::Ordering::Equal })
                .then_with(|| pa.as_bytes().cmp(pb.as_bytes()))
        });
        rows.iter().map(|(p, r)| spec.member(&r.values, r.reached, p)).collect()
    }
}

/// A sorted set's members in order, as bytes.
async fn members_of(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<Vec<u8>> {
    redis::cmd("ZRANGE").arg(key).arg(0).arg(-1).query_async(conn).await.unwrap()
}

async fn apply(s: &Store, params: WriteParams, items: Vec<ApplyItem<'_>>) -> Vec<ApplyResult> {
    s.apply(&[TagBatch { base: BASE, params, items }]).await.unwrap().remove(0)
}

/// Runs `n` random events on a board of `c` and checks it against the model.
async fn check(c: &Columns, earliest: bool, seed: u64, n: usize) {
    let redis = Redis::start();
    let s = store_with_ttl(&redis, 600, &[]).await;
    let mut conn = redis.conn().await;
    // Every other seed keeps a dense index (distinct row keys).
    let dense = seed.is_multiple_of(2);
    let p = WriteParams { dense, ..params(c, earliest) };
    let days: Vec<Vec<Arc<PeriodWrite>>> =
        ["d:1", "d:2"].iter().map(|d| vec![period_write("c", d, None), period_write("c", "all", None)]).collect();
    let mut g = Gen(seed);
    let mut events: Vec<Ev> = Vec::new();
    for k in 0..n {
        // A producer retry: an earlier event again, at a new offset.
        let retry = k > 0 && g.below(20) == 0;
        let e = if retry {
            let old = &events[g.below(events.len() as u64) as usize];
            Ev {
                offset: k as i64,
                member: old.member.clone(),
                id: old.id,
                ts: old.ts,
                values: old.values.clone(),
                day: old.day,
            }
        } else {
            Ev {
                offset: k as i64,
                member: format!("p{}", g.below(9)),
                id: Uuid::from_u128(k as u128 + 1),
                ts: 1_000 + g.below(50) as i64,
                values: (0..c.list.len()).map(|_| g.value()).collect(),
                day: g.below(2) as usize,
            }
        };
        events.push(e);
    }
    let mut model = Model::default();
    for chunk in events.chunks(37) {
        let items: Vec<ApplyItem> =
            chunk.iter().map(|e| row_item(e.offset, &e.member, &e.id, e.ts, &days[e.day], &e.values)).collect();
        let want: Vec<ApplyResult> = chunk.iter().map(|e| model.apply(c, e, &[["d:1", "d:2"][e.day], "all"])).collect();
        let got = apply(&s, p, items.clone()).await;
        assert_eq!(got, want, "seed {seed}: the events' outcomes");
        // Redelivered: nothing changes, and a refusal is answered again.
        let again = apply(&s, p, items).await;
        for (a, g) in again.iter().zip(&got) {
            let want = if matches!(g, ApplyResult::Refused(_)) { g } else { &ApplyResult::DuplicateOffset };
            assert_eq!(a, want, "seed {seed}: a redelivery");
        }
    }
    let spec = c.spec(earliest);
    let r = reader(&redis).await;
    for id in ["d:1", "d:2", "all"] {
        reads_agree(&r, c, earliest, dense, &model, id).await;
        let key = format!("{BASE}:{id}");
        let got = members_of(&mut conn, &key).await;
        let want = model.members(c, earliest, id);
        assert_eq!(got, want, "seed {seed}: {id}'s members in order");
        let index = members_of(&mut conn, &format!("{BASE}:_dense:{id}")).await;
        let mut distinct: Vec<Vec<u8>> = want.iter().map(|m| m[..8 * c.list.len()].to_vec()).collect();
        distinct.dedup();
        assert_eq!(index, if dense { distinct } else { vec![] }, "seed {seed}: {id}'s dense index");
        let rows: BTreeMap<String, Vec<u8>> =
            redis::cmd("HGETALL").arg(format!("{BASE}:_rows:{id}")).query_async(&mut conn).await.unwrap();
        assert_eq!(rows.len(), want.len());
        for m in &want {
            let (values, _, player) = spec.parse_member(m).expect("a member");
            let row = &rows[player];
            assert_eq!(&row[..spec.prefix_len()], &m[..spec.prefix_len()], "{player}'s row");
            assert_eq!(spec.values_of(row), Some(values));
        }
    }
}

/// The reads of period `id` agree with the model: the top, a page, every
/// player's standing (ordinal and competition) and a window around one.
async fn reads_agree(r: &Reader, c: &Columns, earliest: bool, dense: bool, model: &Model, id: &str) {
    let spec = c.spec(earliest);
    let (key, rows_key, shadow_key, dense_key) = (
        format!("{BASE}:{id}"),
        format!("{BASE}:_rows:{id}"),
        format!("{BASE}:_hid:{id}"),
        format!("{BASE}:_dense:{id}"),
    );
    let dense_key = dense.then_some(dense_key.as_str());
    let at = RowsAt { key: &key, rows_key: &rows_key, shadow_key: &shadow_key, dense_key, meta_key: None, spec };
    let want: Vec<(String, Vec<i64>)> = model
        .members(c, earliest, id)
        .iter()
        .map(|m| spec.parse_member(m).map(|(v, _, p)| (p.to_string(), v)).expect("a member"))
        .collect();
    // Competition: one more than the players with a strictly better row.
    let competition = |values: &[i64]| {
        1 + want.iter().filter(|(_, v)| c.better(v, values) == std::cmp::Ordering::Less).count() as i64
    };
    // Dense: one more than the distinct rows strictly better (0 without an index).
    let dense_better = |values: &[i64]| {
        let mut rows: Vec<&Vec<i64>> = want.iter().map(|(_, v)| v).filter(|v| c.better(v, values).is_lt()).collect();
        rows.dedup();
        if dense {
            rows.len() as i64
        } else {
            0
        }
    };
    let top = r.rows_top(&at, 0, 100).await.unwrap();
    assert_eq!(top.total, want.len() as i64);
    assert_eq!(
        top.entries.iter().map(|e| (e.player.clone(), e.values.clone())).collect::<Vec<_>>(),
        want,
        "{id}'s top"
    );
    for (i, (r, e)) in top.ranks().into_iter().zip(&top.entries).enumerate() {
        // (Without an index a listing's dense ranks mean nothing.)
        let want = (i as i64 + 1, competition(&e.values), if dense { dense_better(&e.values) + 1 } else { r.dense });
        assert_eq!((r.ordinal, r.competition, r.dense), want, "{id}: {}'s ranks", e.player);
    }
    let page = r.rows_top(&at, 2, 3).await.unwrap();
    assert_eq!(page.entries, top.entries.iter().skip(2).take(3).cloned().collect::<Vec<_>>());
    if let Some(first) = page.entries.first() {
        assert_eq!(page.ranks()[0].competition, competition(&first.values), "a page's first competition rank");
        if dense {
            assert_eq!(page.ranks()[0].dense, dense_better(&first.values) + 1, "a page's first dense rank");
        }
    }
    // Pages of 4 from the first entry on, and back from the last: the whole
    // board, each page ranked where it stands.
    if let (Some(first), Some(last)) = (top.entries.first(), top.entries.last()) {
        let (mut forward, mut from) = (vec![first.clone()], first.member.clone());
        loop {
            let page = r.rows_page(&at, &from, 4, true).await.unwrap();
            let Some(end) = page.entries.last() else { break };
            assert_eq!(page.start, forward.len() as i64, "{id}: a page's start");
            let first = &page.ranks()[0];
            assert_eq!(
                first.competition,
                competition(&page.entries[0].values),
                "{id}: a page's first competition rank"
            );
            if dense {
                assert_eq!(first.dense, dense_better(&page.entries[0].values) + 1, "{id}: a page's first dense rank");
            }
            from = end.member.clone();
            forward.extend(page.entries);
        }
        assert_eq!(forward, top.entries, "{id}: paged forward");
        let (mut backward, mut from) = (vec![last.clone()], last.member.clone());
        loop {
            let page = r.rows_page(&at, &from, 4, false).await.unwrap();
            let Some(start) = page.entries.first() else { break };
            from = start.member.clone();
            backward.splice(0..0, page.entries);
        }
        assert_eq!(backward, top.entries, "{id}: paged backward");
    }
    for (i, (player, values)) in want.iter().enumerate() {
        let found = r.rows_player(&at, player).await.unwrap().expect("a standing");
        assert_eq!(
            (found.position, found.better + 1, found.dense_better, &found.values, found.hidden),
            (i as i64, competition(values), dense_better(values), values, false)
        );
        let around = r.rows_around(&at, player, 1, false).await.unwrap().expect("a window");
        let lo = i.saturating_sub(1);
        assert_eq!(around.start, lo as i64);
        assert_eq!(around.entries, top.entries[lo..(i + 2).min(want.len())].to_vec(), "{id}: around {player}");
    }
    assert_eq!(r.rows_player(&at, "nobody").await.unwrap(), None);
    assert_eq!(r.rows_around(&at, "nobody", 1, false).await.unwrap(), None);
    what_if_and_friends_agree(r, c, &at, &top.entries, &dense_better, id).await;
}

/// Filled windows, friends reads and rank-of of period `id` agree with its
/// top (`all`, the model's order).
async fn what_if_and_friends_agree(
    r: &Reader,
    c: &Columns,
    at: &RowsAt<'_>,
    all: &[RowEntry],
    dense_better: &dyn Fn(&[i64]) -> i64,
    id: &str,
) {
    let n = all.len();
    let better = |values: &[i64]| all.iter().filter(|e| c.better(&e.values, values).is_lt()).count() as i64;
    let better_or_equal = |values: &[i64]| all.iter().filter(|e| c.better(&e.values, values).is_le()).count() as i64;
    for (i, e) in all.iter().enumerate() {
        // A filled window of 5 moves away from the ends.
        let around = r.rows_around(at, &e.player, 2, true).await.unwrap().expect("a window");
        let lo = i.saturating_sub(2).min(n.saturating_sub(5));
        assert_eq!(around.start, lo as i64, "{id}: filled around {}", e.player);
        assert_eq!(around.entries, all[lo..(lo + 5).min(n)].to_vec(), "{id}: filled around {}", e.player);
        // What the player's own row would rank: after everyone at it.
        let counts = r.rows_rank_of(at, &e.values).await.unwrap();
        assert_eq!(
            (counts.total, counts.better, counts.better_or_equal, counts.dense_better),
            (n as i64, better(&e.values), better_or_equal(&e.values), dense_better(&e.values))
        );
    }
    // Rows nobody has: each column's value moved one step, and the range's ends.
    for e in all.iter().take(6) {
        for k in 0..e.values.len() {
            for d in [-1, 1] {
                let mut v = e.values.clone();
                v[k] = (v[k] + d).clamp(-MAX, MAX);
                let counts = r.rows_rank_of(at, &v).await.unwrap();
                assert_eq!(
                    (counts.better, counts.better_or_equal, counts.dense_better),
                    (better(&v), better_or_equal(&v), dense_better(&v)),
                    "{id}: rank-of {v:?}"
                );
            }
        }
    }
    for v in [vec![MAX; c.list.len()], vec![-MAX; c.list.len()]] {
        let counts = r.rows_rank_of(at, &v).await.unwrap();
        assert_eq!((counts.better, counts.better_or_equal), (better(&v), better_or_equal(&v)), "{id}: rank-of {v:?}");
    }
    // Friends: every other player and one nobody, under each policy.
    let mut asked: Vec<String> = all.iter().step_by(2).map(|e| e.player.clone()).collect();
    asked.insert(asked.len() / 2, "nobody".into());
    for policy in ["ordinal", "competition", "dense"] {
        let got = r.rows_players(at, &asked, policy).await.unwrap();
        assert_eq!(got.total, n as i64);
        for (p, row) in asked.iter().zip(&got.rows) {
            let want = all.iter().position(|e| &e.player == p).map(|i| {
                let count = match policy {
                    "ordinal" => i as i64,
                    "competition" => better(&all[i].values),
                    _ => dense_better(&all[i].values),
                };
                (all[i].clone(), count)
            });
            assert_eq!(row, &want, "{id}: friend {p} ({policy})");
        }
    }
}

#[tokio::test]
async fn two_columns_each_aggregated_on_its_own() {
    use ColumnMode::*;
    // Most wins, then the fastest time.
    let c = board(&[(Sum, Order::Desc), (Min, Order::Asc)], RowMode::Columns);
    check(&c, false, 0x9e37_79b9_7f4a_7c15, 400).await;
    check(&c, true, 0x2545_f491_4f6c_dd1d, 400).await;
    // A latest column (by event time) beside a max.
    let c = board(&[(Latest, Order::Asc), (Max, Order::Desc)], RowMode::Columns);
    check(&c, true, 7, 400).await;
}

#[tokio::test]
async fn two_columns_as_one_best_submission() {
    use ColumnMode::*;
    // Fewest deaths, then the fastest time of that same run.
    let c = board(&[(Min, Order::Asc), (Min, Order::Asc)], RowMode::Best);
    check(&c, false, 11, 400).await;
    let c = board(&[(Max, Order::Desc), (Min, Order::Asc)], RowMode::Best);
    check(&c, true, 12, 400).await;
}

#[tokio::test]
async fn five_columns_in_mixed_orders_in_both_row_modes() {
    use ColumnMode::*;
    let c = board(
        &[(Sum, Order::Desc), (Max, Order::Asc), (Min, Order::Desc), (Latest, Order::Desc), (Sum, Order::Asc)],
        RowMode::Columns,
    );
    check(&c, false, 21, 500).await;
    check(&c, true, 22, 500).await;
    let c = board(
        &[(Max, Order::Desc), (Min, Order::Asc), (Min, Order::Asc), (Max, Order::Desc), (Max, Order::Desc)],
        RowMode::Best,
    );
    check(&c, false, 23, 500).await;
    check(&c, true, 24, 500).await;
}

/// Top-K on best rows: each period keeps its best K members, their rows
/// and meta hashes only theirs, event by event as the model trims.
#[tokio::test]
async fn top_k_keeps_each_periods_best_rows_and_drops_the_others_rows() {
    use ColumnMode::*;
    const K: usize = 3;
    for (c, earliest, seed) in [
        (board(&[(Min, Order::Asc), (Min, Order::Asc)], RowMode::Best), true, 31),
        (board(&[(Max, Order::Desc), (Min, Order::Asc), (Max, Order::Desc)], RowMode::Best), false, 32),
    ] {
        let redis = Redis::start();
        let s = store_with_ttl(&redis, 600, &[]).await;
        let mut conn = redis.conn().await;
        let p = WriteParams { top_k: K as u64, meta: true, ..params(&c, earliest) };
        let spec = c.spec(earliest);
        let periods = vec![period_write("c", "d:1", None), period_write("c", "all", None)];
        let (mut g, mut model) = (Gen(seed), Model::default());
        for k in 0..200 {
            let e = Ev {
                offset: k + 1,
                member: format!("p{}", g.below(9)),
                id: Uuid::from_u128(k as u128 + 1),
                ts: 1_000 + g.below(50) as i64,
                values: (0..c.list.len()).map(|_| g.value()).collect(),
                day: 0,
            };
            let meta = format!("{{\"name\":\"{} {k}\"}}", e.member);
            let item =
                ApplyItem { meta: Some(&meta), ..row_item(e.offset, &e.member, &e.id, e.ts, &periods, &e.values) };
            let want = model.apply(&c, &e, &["d:1", "all"]);
            assert_eq!(apply(&s, p, vec![item]).await, [want], "seed {seed}: event {k}");
            // The model keeps each period's best K.
            for id in ["d:1", "all"] {
                let kept: Vec<Vec<u8>> = model.members(&c, earliest, id).into_iter().take(K).collect();
                let players: HashSet<String> =
                    kept.iter().map(|m| spec.parse_member(m).unwrap().2.to_string()).collect();
                model.periods.get_mut(id).unwrap().retain(|p, _| players.contains(p));
                let got = members_of(&mut conn, &format!("{BASE}:{id}")).await;
                assert_eq!(got, kept, "seed {seed}: {id} after event {k}");
                let rows: HashSet<String> =
                    redis::cmd("HKEYS").arg(format!("{BASE}:_rows:{id}")).query_async(&mut conn).await.unwrap();
                assert_eq!(rows, players, "seed {seed}: {id}'s rows after event {k}");
                let metas: HashSet<String> =
                    redis::cmd("HKEYS").arg(format!("{BASE}:_meta:{id}")).query_async(&mut conn).await.unwrap();
                assert_eq!(metas, players, "seed {seed}: {id}'s metadata after event {k}");
            }
        }
    }
}
