//! Rank changes (`notify_top`) as the apply script decides them, against a
//! real redis-server and a model: every event's move into or inside the top
//! N, its players passed and pushed out, by the board's order and ties,
//! through calls of many events, duplicates and redeliveries.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rankflow::board::{Order, PeriodWrite, WriteOp, WriteParams};
use rankflow::store::{ApplyItem, ApplyResult, RankMove, Store, TagBatch};
use support::apply::{period_write, store_with_ttl};
use support::changes::{rank_move, Deliveries};
use support::Redis;
use uuid::Uuid;

const N: u32 = 5;

async fn store(redis: &Redis) -> Store {
    store_with_ttl(redis, 7 * 86_400, &["lb:{p}"]).await
}

fn pw(period: &str) -> Arc<PeriodWrite> {
    period_write("p", period, None)
}

fn params(op: WriteOp) -> WriteParams {
    WriteParams { notify: N, ..WriteParams::plain(op, 1, 1 << 40) }
}

/// One event as the test sends it.
#[derive(Clone)]
struct Ev {
    offset: i64,
    member: String,
    num: i64,
    ts: i64,
    id: Uuid,
    /// Also written to the day (every event writes all time).
    daily: bool,
}

/// The board as a model: each period's stored scores, and the event times of "latest".
struct Model {
    op: WriteOp,
    order: Order,
    boards: HashMap<&'static str, BTreeMap<String, i64>>,
    times: HashMap<&'static str, HashMap<String, i64>>,
    /// What each record's deliveries answer.
    deliveries: Deliveries<Moved>,
}

/// A move as compared: (period, old rank, new rank, stored, passed, pushed out).
type Moved = (String, Option<u32>, u32, i64, Vec<String>, Option<String>);

impl Model {
    fn ranks(&self, period: &str) -> Vec<(i64, String)> {
        let mut all: Vec<(i64, String)> =
            self.boards.get(period).map(|b| b.iter().map(|(m, s)| (*s, m.clone())).collect()).unwrap_or_default();
        all.sort_by(|a, b| self.order.entries((a.0, &a.1), (b.0, &b.1)));
        all
    }

    /// Applies one event to one period; its move, if it made one, by the definition.
    fn apply_period(&mut self, period: &'static str, ev: &Ev) -> Option<Moved> {
        let before = self.ranks(period);
        let board = self.boards.entry(period).or_default();
        let old = board.get(&ev.member).copied();
        let new = match self.op {
            WriteOp::Sum => Some(old.unwrap_or(0) + ev.num),
            WriteOp::Lt => Some(old.map_or(ev.num, |o| o.min(ev.num))),
            WriteOp::Gt => Some(old.map_or(ev.num, |o| o.max(ev.num))),
            WriteOp::Latest => {
                let times = self.times.entry(period).or_default();
                match times.get(&ev.member) {
                    Some(&t) if t >= ev.ts => None,
                    _ => {
                        times.insert(ev.member.clone(), ev.ts);
                        Some(ev.num)
                    }
                }
            }
            WriteOp::Columns => unreachable!("rank changes are of boards of one score"),
        }?;
        board.insert(ev.member.clone(), new);
        let names = |list: Vec<(i64, String)>| list.into_iter().map(|(_, m)| m).collect::<Vec<_>>();
        let (old_rank, now, passed, pushed_out) = rank_move(&names(before), &names(self.ranks(period)), &ev.member, N)?;
        Some((period.to_string(), old_rank, now, new, passed, pushed_out))
    }

    /// One event's moves, as the script must report them.
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
async fn send(
    store: &Store,
    op: WriteOp,
    events: &[Ev],
    both: &[Arc<PeriodWrite>],
    all: &[Arc<PeriodWrite>],
) -> Vec<Vec<Moved>> {
    let items = events
        .iter()
        .map(|e| ApplyItem {
            field: "scores:0",
            offset: e.offset,
            member: &e.member,
            num: e.num,
            tie: 0,
            ts: e.ts,
            event_id: &e.id,
            periods: if e.daily { both } else { all },
            meta: None,
            record_ts: 0,
            values: &[],
            team: None,
        })
        .collect();
    let batch = TagBatch { base: "lb:{p}", params: params(op), items };
    let got = store.apply_prepared(&store.prepare(&[batch])).await.unwrap();
    assert!(got.results[0].iter().all(|r| *r != ApplyResult::Refused(0)));
    let mut out = vec![Vec::new(); events.len()];
    for m in &got.moves[0] {
        let RankMove { event, period, old_rank, new_rank, stored, passed, pushed_out, .. } = m.clone();
        out[event].push((period, old_rank, new_rank, stored, passed, pushed_out));
    }
    for o in &mut out {
        o.sort();
    }
    out
}

/// A random run on one board: the script's moves are the model's, event by event.
async fn run(op: WriteOp, seed: u64) {
    let redis = Redis::start();
    let store = store(&redis).await;
    let mut rng = StdRng::seed_from_u64(seed);
    let order = if op == WriteOp::Lt { Order::Asc } else { Order::Desc };
    let mut model =
        Model { op, order, boards: HashMap::new(), times: HashMap::new(), deliveries: Deliveries::default() };
    let (both, all) = (vec![pw("d:1"), pw("all")], vec![pw("all")]);
    let mut sent: Vec<Vec<Ev>> = Vec::new();
    let (mut offset, mut moves_seen) = (0i64, 0usize);
    for call in 0..60 {
        let redeliver = call > 3 && rng.random_bool(0.1);
        let events: Vec<Ev> = if redeliver {
            sent[rng.random_range(0..sent.len())].clone()
        } else {
            let n = rng.random_range(1..40);
            (0..n)
                .map(|_| {
                    offset += 1;
                    let earlier = sent.iter().flatten().filter(|e| e.offset < offset).count();
                    let id = if earlier > 0 && rng.random_bool(0.05) {
                        sent.iter().flatten().nth(rng.random_range(0..earlier)).unwrap().id
                    } else {
                        Uuid::new_v4()
                    };
                    let num = match op {
                        WriteOp::Sum => rng.random_range(-6..12),
                        _ => rng.random_range(0..30),
                    };
                    Ev {
                        offset,
                        member: format!("p{}", rng.random_range(0..30)),
                        num,
                        ts: rng.random_range(0..10_000),
                        id,
                        daily: offset % 2 == 0,
                    }
                })
                .collect()
        };
        let want: Vec<Vec<Moved>> = events.iter().map(|e| model.apply(e)).collect();
        let got = send(&store, op, &events, &both, &all).await;
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "{op:?} seed {seed}, call {call}, event {k} (offset {})", events[k].offset);
        }
        moves_seen += want.iter().map(Vec::len).sum::<usize>();
        if !redeliver {
            sent.push(events);
        }
    }
    assert!(moves_seen > 50, "the run moved the top often enough to mean something: {moves_seen}");
}

#[tokio::test]
async fn a_sum_boards_moves_with_negative_deltas_ties_and_redeliveries_are_the_models() {
    run(WriteOp::Sum, 1).await;
}

#[tokio::test]
async fn a_latest_boards_moves_when_values_fall_are_the_models() {
    run(WriteOp::Latest, 2).await;
}

#[tokio::test]
async fn an_ascending_best_boards_moves_are_the_models() {
    run(WriteOp::Lt, 3).await;
}

/// The end-to-end board: a sum board whose ties go to whoever reached the
/// score first, notifying its top 5.
const ARENA: &str = r#"
[[board]]
id = "arena"
on = ["match"]
mode = "sum"
periods = ["all_time"]
tie_break = "earliest"
notify_top = 5
"#;

/// A `match` event of `player` worth `score` at `ts`, under a fixed event id.
fn scored(id: u128, player: &str, score: i64, ts: i64) -> (String, Vec<u8>, Option<i64>) {
    let value = serde_json::json!({"event_id": Uuid::from_u128(id).to_string(), "type": "match",
                                   "player_id": player, "score": score, "ts": ts});
    (player.to_string(), value.to_string().into_bytes(), Some(ts))
}

/// The change a test expects: (event id, player, old rank, new rank, score, passed, pushed out).
type Want = (u128, &'static str, Option<u32>, u32, i64, &'static [&'static str], Option<&'static str>);

/// The change records of `topic`, deduplicated by their header (a header
/// seen twice must carry the same record), by change id.
fn changes(broker: &support::Broker, topic: &str) -> (BTreeMap<String, serde_json::Value>, usize) {
    use rdkafka::message::Message;
    let mut out: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    let records = broker.read_all(topic, 1);
    for m in &records {
        let id = support::header(m, "rankflow-change-id").expect("every change has its id");
        let value: serde_json::Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
        assert_eq!(m.key(), value["player_id"].as_str().map(str::as_bytes), "keyed by the player");
        if let Some(seen) = out.insert(id.clone(), value.clone()) {
            assert_eq!(seen, value, "{id}: one change id, two different records");
        }
    }
    (out, records.len())
}

fn expected(wants: &[Want]) -> BTreeMap<String, serde_json::Value> {
    wants
        .iter()
        .map(|(id, player, old, new, score, passed, pushed)| {
            let event_id = Uuid::from_u128(*id).to_string();
            let value = serde_json::json!({
                "board": "arena", "period": "all", "split": null, "player_id": player,
                "old_rank": old, "new_rank": new, "score": score, "passed": passed, "pushed_out": pushed,
                "event_id": event_id,
            });
            (format!("{event_id}/arena/all"), value)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scripted_top_5_gives_each_change_once_by_its_header_through_an_unwritable_topic_and_a_sigkill() {
    use std::time::{Duration, Instant};
    let s = support::Stack::start(1).await;
    let t0 = chrono::Utc::now().timestamp_millis() - 60_000;
    let at = |k: i64| t0 + k * 1000;
    // Enter, climb, a tie the earlier total wins, a score that moves
    // nothing, one outside the top, and a producer's retry of event 7.
    let first = [
        scored(1, "a", 50, at(1)),
        scored(2, "b", 40, at(2)),
        scored(3, "c", 30, at(3)),
        scored(4, "d", 20, at(4)),
        scored(5, "e", 10, at(5)),
        scored(6, "f", 15, at(6)),
        scored(7, "f", 20, at(7)),
        scored(8, "e", 25, at(8)),
        scored(9, "a", 1, at(9)),
        scored(10, "h", 1, at(10)),
        scored(7, "f", 20, at(7)),
    ];
    s.broker.produce(&s.topic, &first).await;
    // The changes topic does not exist yet: the partition waits, its offset unstored.
    let mut cfg = support::WorkerConfig::new(&s.broker, &s.redis, &s.topic, &s.dlq, ARENA);
    let changes_1 = support::random_name("changes");
    cfg.kafka_extra = format!("changes_topic = \"{changes_1}\"");
    let mut w = support::Worker::spawn(&cfg);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !w.log().contains("changes topic") {
        assert!(Instant::now() < deadline, "the worker never tried the changes topic:\n{}", w.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(s.broker.committed(&cfg.group, &s.topic, 1)[0] <= 0, "committed past a change not produced");
    s.broker.create_topic(&changes_1, 1).await;
    s.broker.wait_committed_to_end(&cfg.group, &s.topic, 1, Duration::from_secs(90));
    let (got, _) = changes(&s.broker, &changes_1);
    let want_1: [Want; 8] = [
        (1, "a", None, 1, 50, &[], None),
        (2, "b", None, 2, 40, &[], None),
        (3, "c", None, 3, 30, &[], None),
        (4, "d", None, 4, 20, &[], None),
        (5, "e", None, 5, 10, &[], None),
        (6, "f", None, 5, 15, &["e"], Some("e")),
        (7, "f", Some(5), 3, 35, &["c", "d"], None),
        (8, "e", None, 4, 35, &["c", "d"], Some("d")),
    ];
    assert_eq!(got, expected(&want_1), "the first part's changes, the duplicate's none");
    w.sigterm(Duration::from_secs(30));

    // The second part's changes wait on a topic that does not exist yet,
    // and the worker is killed with them applied in Redis, unproduced.
    let second = [scored(12, "g", 45, at(12)), scored(13, "c", 30, at(13)), scored(14, "d", 100, at(14))];
    s.broker.produce(&s.topic, &second).await;
    let changes_2 = support::random_name("changes");
    cfg.kafka_extra = format!("changes_topic = \"{changes_2}\"");
    let mut w = support::Worker::spawn(&cfg);
    support::wait_http(w.http_port, Duration::from_secs(30)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, d) = w.get_json("/v1/boards/arena/players/d?period=all_time").await;
        if d["score"] == 120 && w.log().contains("changes topic") {
            break;
        }
        assert!(Instant::now() < deadline, "the second part was not applied:\n{}", w.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(s.broker.committed(&cfg.group, &s.topic, 1)[0] <= 11, "committed past changes not produced");
    w.sigkill();
    s.broker.create_topic(&changes_2, 1).await;
    let w = support::Worker::spawn(&cfg);
    s.broker.wait_committed_to_end(&cfg.group, &s.topic, 1, Duration::from_secs(90));
    let (got, _) = changes(&s.broker, &changes_2);
    let want_2: [Want; 3] = [
        (12, "g", None, 2, 45, &["b", "f", "e", "c"], Some("c")),
        (13, "c", None, 1, 60, &["a", "g", "b", "f", "e"], Some("e")),
        (14, "d", None, 1, 120, &["c", "a", "g", "b", "f"], Some("f")),
    ];
    assert_eq!(
        got,
        expected(&want_2),
        "the redelivered records' changes, as Redis decided them before the kill:\n{}",
        w.log()
    );
    let redelivered = w.metric("rankflow_events_duplicate_total", &[("board", "arena"), ("kind", "offset")]).await;
    assert_eq!(redelivered, 3.0, "the second part was redelivered, not applied again");
}
