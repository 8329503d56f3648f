//! Rank changes (`notify_top`) on boards ranked by several columns, as the
//! apply script decides them, against a real redis-server and the model in
//! `board::columns`: every event's move into or inside the top N of each
//! period, its row, the players passed and pushed out, through calls of
//! many events with ties through every column, producer retries and
//! redeliveries, in both row modes and both tie rules.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rankflow::board::columns::{Column, ColumnMode, Columns, Combined, Row, RowMode};
use rankflow::board::{Order, PeriodWrite, WriteOp, WriteParams};
use rankflow::store::{RankMove, Store, TagBatch};
use support::apply::{period_write, row_item, store_with_ttl};
use support::changes::{rank_move, Deliveries};
use support::periods::Lcg;
use support::Redis;
use uuid::Uuid;

const N: u32 = 4;

/// A move as compared: (period, old rank, new rank, row values, passed, pushed out).
type Moved = (String, Option<u32>, u32, Vec<i64>, Vec<String>, Option<String>);

struct Ev {
    offset: i64,
    member: String,
    id: Uuid,
    ts: i64,
    values: Vec<i64>,
    daily: bool,
}

struct Model {
    c: Columns,
    earliest: bool,
    periods: HashMap<&'static str, BTreeMap<String, Row>>,
    deliveries: Deliveries<Moved>,
}

impl Model {
    /// Period `p`'s players in board order.
    fn ranks(&self, p: &str) -> Vec<String> {
        let spec = self.c.spec(self.earliest);
        let mut all: Vec<(Vec<u8>, String)> = self
            .periods
            .get(p)
            .map(|rows| rows.iter().map(|(m, r)| (spec.member(&r.values, r.reached, m), m.clone())).collect())
            .unwrap_or_default();
        all.sort();
        all.into_iter().map(|(_, m)| m).collect()
    }

    fn apply_period(&mut self, p: &'static str, ev: &Ev) -> Option<Moved> {
        let before = self.ranks(p);
        let rows = self.periods.entry(p).or_default();
        let mut row = rows.get(&ev.member).cloned();
        let old = row.clone();
        if let Combined::OutOfRange(_) = self.c.combine(&mut row, &ev.values, ev.ts) {
            unreachable!("values stay small");
        }
        let row = row.expect("a row");
        rows.insert(ev.member.clone(), row.clone());
        if old.as_ref() == Some(&row) {
            return None;
        }
        let (old_rank, now, passed, pushed_out) = rank_move(&before, &self.ranks(p), &ev.member, N)?;
        Some((p.to_string(), old_rank, now, row.values, passed, pushed_out))
    }

    fn apply(&mut self, ev: &Ev) -> Vec<Moved> {
        if let Some(again) = self.deliveries.answered(ev.offset, ev.id) {
            return again;
        }
        let mut moved = Vec::new();
        if ev.daily {
            moved.extend(self.apply_period("d:1", ev));
        }
        moved.extend(self.apply_period("all", ev));
        moved.sort();
        self.deliveries.record(ev.offset, &moved);
        moved
    }
}

/// Sends `events` as one call; each event's reported moves.
async fn send(store: &Store, params: WriteParams, events: &[Ev], periods: [&[Arc<PeriodWrite>]; 2]) -> Vec<Vec<Moved>> {
    let items = events
        .iter()
        .map(|e| row_item(e.offset, &e.member, &e.id, e.ts, periods[usize::from(e.daily)], &e.values))
        .collect();
    let got = store.apply_prepared(&store.prepare(&[TagBatch { base: "lb:{c}", params, items }])).await.unwrap();
    let spec = params.columns.expect("columns");
    let mut out = vec![Vec::new(); events.len()];
    for m in &got.moves[0] {
        let RankMove { event, period, old_rank, new_rank, row, passed, pushed_out, .. } = m.clone();
        let values = spec.values_of(&row.expect("a row")).expect("a row of the board");
        out[event].push((period, old_rank, new_rank, values, passed, pushed_out));
    }
    for o in &mut out {
        o.sort();
    }
    out
}

/// A random run: the script's moves are the model's, event by event.
async fn run(c: Columns, earliest: bool, seed: u64) {
    let redis = Redis::start();
    let store = store_with_ttl(&redis, 3600, &["lb:{c}"]).await;
    let mut params = WriteParams { notify: N, ..WriteParams::plain(WriteOp::Columns, 1, 1 << 40) };
    params.dense = false;
    params.columns = Some(c.spec(earliest));
    let (all, day) = (period_write("c", "all", None), period_write("c", "d:1", None));
    let (only_all, both) = (vec![all.clone()], vec![day, all]);
    let mut model = Model { c, earliest, periods: HashMap::new(), deliveries: Deliveries::default() };
    let mut rng = Lcg(seed);
    let mut events: Vec<Ev> = Vec::new();
    let mut offset = 0;
    let mut moves = 0;
    for call in 0..40 {
        let mut batch = Vec::new();
        for _ in 0..(1 + rng.next(25)) {
            offset += 1;
            // A producer retry (same id, new offset) now and then.
            let e = match rng.next(15) {
                0 if !events.is_empty() => {
                    let old = &events[rng.next(events.len() as u64) as usize];
                    Ev { offset, id: old.id, member: old.member.clone(), values: old.values.clone(), ..*old }
                }
                _ => Ev {
                    offset,
                    member: format!("p{}", rng.next(10)),
                    id: Uuid::new_v4(),
                    ts: 1_000 + rng.next(40) as i64,
                    values: (0..model.c.list.len()).map(|_| rng.next(4) as i64 - 1).collect(),
                    daily: rng.next(3) > 0,
                },
            };
            batch.push(e);
        }
        let want: Vec<Vec<Moved>> = batch.iter().map(|e| model.apply(e)).collect();
        let got = send(&store, params, &batch, [&only_all, &both]).await;
        assert_eq!(got, want, "seed {seed}, call {call}");
        moves += want.iter().map(Vec::len).sum::<usize>();
        // Every third call is delivered again: the same moves are answered.
        if call % 3 == 0 {
            let again = send(&store, params, &batch, [&only_all, &both]).await;
            let want: Vec<Vec<Moved>> = batch.iter().map(|e| model.apply(e)).collect();
            assert_eq!(again, want, "seed {seed}, call {call} redelivered");
        }
        events.extend(batch);
    }
    assert!(moves > 20, "seed {seed}: only {moves} moves");
}

fn columns(specs: &[(ColumnMode, Order)], row: RowMode) -> Columns {
    let list = specs.iter().enumerate().map(|(i, &(mode, order))| Column::new(format!("c{i}"), mode, order)).collect();
    Columns { list, row }
}

#[tokio::test]
async fn rank_changes_of_rows_aggregated_column_by_column_are_the_models() {
    use ColumnMode::*;
    let c = columns(&[(Sum, Order::Desc), (Min, Order::Asc)], RowMode::Columns);
    run(c.clone(), false, 1).await;
    run(c, true, 2).await;
    // A latest column can move a row down.
    run(columns(&[(Latest, Order::Desc), (Sum, Order::Asc), (Max, Order::Desc)], RowMode::Columns), false, 3).await;
    // Five columns, every mode, mixed orders.
    let five = [(Sum, Order::Desc), (Max, Order::Asc), (Min, Order::Desc), (Latest, Order::Asc), (Sum, Order::Asc)];
    run(columns(&five, RowMode::Columns), true, 6).await;
}

#[tokio::test]
async fn rank_changes_of_best_rows_are_the_models() {
    use ColumnMode::*;
    run(columns(&[(Min, Order::Asc), (Min, Order::Asc)], RowMode::Best), true, 4).await;
    run(columns(&[(Max, Order::Desc), (Min, Order::Asc)], RowMode::Best), false, 5).await;
    let five = [(Min, Order::Asc), (Max, Order::Desc), (Min, Order::Asc), (Max, Order::Asc), (Min, Order::Desc)];
    run(columns(&five, RowMode::Best), true, 7).await;
}

/// Through the worker and Apache Kafka: the change records of a board with columns
/// carry `scores`, each column's value after the move.
#[tokio::test(flavor = "multi_thread")]
async fn a_change_record_of_a_board_with_columns_carries_its_scores() {
    use rdkafka::message::Message;
    use serde_json::json;
    let s = support::Stack::start(1).await;
    let boards = r#"
[[board]]
id = "arena"
on = ["match"]
columns = [{ name = "wins", mode = "sum" }, { name = "time_ms", mode = "min", order = "asc" }]
periods = ["all_time"]
notify_top = 2
"#;
    let now = chrono::Utc::now().timestamp_millis();
    let event = |k: i64, player: &str, wins: i64, time_ms: i64| {
        let v = json!({ "event_id": Uuid::from_u128(k as u128).to_string(), "type": "match", "player_id": player,
                        "ts": now + k, "scores": { "wins": wins, "time_ms": time_ms } });
        (player.to_string(), v.to_string().into_bytes(), Some(now + k))
    };
    // alice tops; bob passes her (same wins, faster); carol stays third;
    // alice wins again, faster still, and passes bob.
    let records = [
        event(1, "alice", 1, 50_000),
        event(2, "bob", 1, 40_000),
        event(3, "carol", 0, 1_000),
        event(4, "alice", 1, 30_000),
    ];
    s.broker.produce(&s.topic, &records).await;
    let mut cfg = support::WorkerConfig::new(&s.broker, &s.redis, &s.topic, &s.dlq, boards);
    let changes = support::random_name("changes");
    s.broker.create_topic(&changes, 1).await;
    cfg.kafka_extra = format!("changes_topic = \"{changes}\"");
    let _w = support::Worker::spawn(&cfg);
    s.broker.wait_committed_to_end(&cfg.group, &s.topic, 1, std::time::Duration::from_secs(60));
    let got: Vec<serde_json::Value> = s
        .broker
        .read_all(&changes, 1)
        .iter()
        .map(|m| {
            let mut v: serde_json::Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
            v.as_object_mut()
                .unwrap()
                .retain(|k, _| ["player_id", "old_rank", "new_rank", "scores", "passed"].contains(&k.as_str()));
            v
        })
        .collect();
    let change = |player: &str, old: Option<u32>, new: u32, wins: i64, time_ms: i64, passed: &[&str]| {
        json!({ "player_id": player, "old_rank": old, "new_rank": new,
                "scores": { "wins": wins, "time_ms": time_ms }, "passed": passed })
    };
    assert_eq!(
        got,
        [
            change("alice", None, 1, 1, 50_000, &[]),
            change("bob", None, 1, 1, 40_000, &["alice"]),
            change("alice", Some(2), 1, 2, 30_000, &["bob"]),
        ]
    );
}
