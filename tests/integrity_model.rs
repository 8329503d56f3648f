//! Score integrity against a model, through the real worker, Apache Kafka and
//! Redis: a stream of honest and rule-breaking scores (and producer
//! retries) over four partitions, the worker killed -9 mid-stream; every
//! held event held once, listed and on the review topic; approvals and
//! rejections (some produced twice, some for unknown or decided ids)
//! applied once; the boards equal the model's in every period; then a
//! rebuild reproduces the boards and the queue.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rdkafka::message::Message;
use serde_json::{json, Value};
use support::periods::Lcg;
use support::*;

const PARTITIONS: i32 = 4;
const HOUR: i64 = 3_600_000;

const BOARDS: &str = r#"
[[board]]
id = "pts"
on = ["match"]
mode = "sum"
periods = ["all_time", "daily"]
[board.integrity]
score_over = { limit = 200, action = "hold" }
gain_over = { limit = 1500, window = "1h", action = "hold" }

[[board]]
id = "best"
on = ["match"]
mode = "best"
periods = ["all_time", "daily"]
[board.integrity]
jump_over = { limit = "3x", action = "hold" }
score_over = { limit = 100000, action = "reject" }
"#;

/// One generated event.
#[derive(Clone)]
struct Ev {
    id: String,
    player: String,
    score: i64,
    ts: i64,
}

/// What the model made of one board: its periods' values and its held events.
#[derive(Default)]
struct Board {
    /// period id -> player -> value.
    periods: BTreeMap<String, BTreeMap<String, i64>>,
    /// Held event id -> the event.
    held: BTreeMap<String, Ev>,
}

fn day(ts: i64) -> String {
    format!("d:{}", chrono::DateTime::from_timestamp_millis(ts).unwrap().format("%Y-%m-%d"))
}

impl Board {
    fn apply(&mut self, e: &Ev, sum: bool) {
        for period in ["all".to_string(), day(e.ts)] {
            let v = self.periods.entry(period).or_default().entry(e.player.clone()).or_insert(if sum {
                0
            } else {
                i64::MIN
            });
            *v = if sum { *v + e.score } else { (*v).max(e.score) };
        }
    }
}

/// The boards as the rules decide them: each player's events in stream
/// order, a producer retry (an id seen before) changing nothing.
fn model(events: &[Ev]) -> (Board, Board) {
    let (mut pts, mut best) = (Board::default(), Board::default());
    let mut seen = BTreeSet::new();
    let mut applied: BTreeMap<&str, Vec<(i64, i64)>> = BTreeMap::new();
    for e in events {
        if !seen.insert(e.id.clone()) {
            continue;
        }
        let window: i64 = applied
            .get(e.player.as_str())
            .map_or(0, |l| l.iter().filter(|(t, _)| *t > e.ts - HOUR && *t <= e.ts).map(|(_, d)| d).sum());
        if e.score > 200 || window + e.score > 1500 {
            pts.held.insert(e.id.clone(), e.clone());
        } else {
            pts.apply(e, true);
            applied.entry(&e.player).or_default().push((e.ts, e.score));
        }
        let previous = best.periods.get("all").and_then(|p| p.get(&e.player)).copied();
        if e.score > 100_000 {
            continue; // refused on best
        }
        if previous.is_some_and(|b| b > 0 && e.score > 3 * b) {
            best.held.insert(e.id.clone(), e.clone());
        } else {
            best.apply(e, false);
        }
    }
    (pts, best)
}

/// 40 players, event times rising by 40 s from 44 hours ago (two days'
/// periods), scores mostly small, some big, a few beyond best's range; 3%
/// produced again later (a producer's retry). Every player's last event is
/// big, so that it is held (and its approval changes no later decision).
fn stream(n: usize) -> (Vec<Ev>, Vec<Record>, BTreeSet<String>) {
    let mut rng = Lcg(7);
    let start = chrono::Utc::now().timestamp_millis() - 44 * HOUR;
    let mut events = Vec::new();
    for i in 0..n {
        let player = format!("p{:02}", rng.next(40));
        let score = match rng.next(100) {
            0..=5 => 300 + rng.next(600) as i64,
            6 => 200_000,
            _ => 1 + rng.next(120) as i64,
        };
        events.push(Ev { id: uuid::Uuid::new_v4().to_string(), player, score, ts: start + i as i64 * 40_000 });
    }
    for p in 0..40 {
        let ts = start + n as i64 * 40_000 + p * 1000;
        events.push(Ev { id: uuid::Uuid::new_v4().to_string(), player: format!("p{p:02}"), score: 5000, ts });
    }
    let finals: BTreeSet<String> = events[n..].iter().map(|e| e.id.clone()).collect();
    let mut produced: Vec<Ev> = Vec::new();
    for e in &events {
        produced.push(e.clone());
        if rng.next(100) < 3 {
            produced.push(e.clone()); // the same event, again
        }
    }
    let records = produced
        .iter()
        .map(|e| {
            let v = json!({ "event_id": e.id, "type": "match", "player_id": e.player, "score": e.score, "ts": e.ts });
            (e.player.clone(), v.to_string().into_bytes(), Some(e.ts))
        })
        .collect();
    (produced, records, finals)
}

fn review(kind: &str, board: &str, e: &Ev) -> Value {
    json!({ "event_id": uuid::Uuid::new_v4().to_string(), "type": kind, "player_id": e.player, "board": board,
            "held_event_id": e.id, "ts": chrono::Utc::now().timestamp_millis() })
}

/// Every pending held event of `board`, paged through.
async fn queue(w: &Worker, board: &str) -> Vec<String> {
    let (mut out, mut cursor) = (Vec::new(), String::new());
    loop {
        let (status, body) = w.get_json(&format!("/v1/review?board={board}&limit=37&fresh=true{cursor}")).await;
        assert_eq!(status, 200, "{body}");
        out.extend(body["held"].as_array().unwrap().iter().map(|h| h["event_id"].as_str().unwrap().to_string()));
        match body["next"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => return out,
        }
    }
}

async fn assert_boards(conn: &mut redis::aio::MultiplexedConnection, pts: &Board, best: &Board, when: &str) {
    for (name, board) in [("pts", pts), ("best", best)] {
        for (period, want) in &board.periods {
            let got = zset_values(conn, &format!("lb:{{{name}}}:{period}")).await;
            assert_eq!(&got, want, "{when}: board {name}, period {period}");
        }
    }
}

async fn assert_queues(w: &Worker, pts: &Board, best: &Board, when: &str) {
    for (name, board) in [("pts", pts), ("best", best)] {
        let listed = queue(w, name).await;
        let set: BTreeSet<String> = listed.iter().cloned().collect();
        assert_eq!(set.len(), listed.len(), "{when}: {name}'s queue lists an event twice");
        assert_eq!(set, board.held.keys().cloned().collect::<BTreeSet<_>>(), "{when}: {name}'s queue");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn held_events_and_their_reviews_count_exactly_once_through_a_kill_and_a_rebuild() {
    let stack = Stack::start(PARTITIONS).await;
    let admin = stack.admin_topic().await;
    let review_topic = random_name("review");
    stack.broker.create_topic(&review_topic, 1).await;
    let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, BOARDS);
    cfg.admin_topics = vec![admin.clone()];
    cfg.kafka_extra = format!("review_topic = \"{review_topic}\"");
    let (events, records, last) = stream(3000);
    let (mut pts, mut best) = model(&events);
    assert!(
        pts.held.len() > 150 && best.held.len() > 40,
        "the stream holds enough: {} {}",
        pts.held.len(),
        best.held.len()
    );

    let w = killed_mid_stream(&stack, &cfg, &records, PARTITIONS).await;

    let mut conn = stack.redis.conn().await;
    assert_boards(&mut conn, &pts, &best, "after the stream").await;
    assert_queues(&w, &pts, &best, "after the stream").await;
    // The review topic: every held event at least once (the kill may repeat one), nothing else.
    let on_topic: BTreeSet<(String, String)> = stack
        .broker
        .read_all(&review_topic, 1)
        .iter()
        .map(|m| {
            let v: Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
            (v["board"].as_str().unwrap().to_string(), v["event_id"].as_str().unwrap().to_string())
        })
        .collect();
    let held: BTreeSet<(String, String)> = [("pts", &pts), ("best", &best)]
        .iter()
        .flat_map(|(b, m)| m.held.keys().map(move |id| (b.to_string(), id.clone())))
        .collect();
    assert_eq!(on_topic, held);
    assert!(stack.broker.read_all(&stack.dlq, 1).is_empty(), "no record is refused by every board");

    // Reviews: each player's last event approved (on both boards when held
    // there), every third other held event rejected, the rest left pending;
    // some produced twice, plus unknown ids and second decisions.
    let mut reviews = Vec::new();
    for (name, board) in [("pts", &mut pts), ("best", &mut best)] {
        let held: Vec<Ev> = board.held.values().cloned().collect();
        for (i, e) in held.iter().enumerate() {
            if last.contains(&e.id) {
                let r = review("review_approved", name, e);
                reviews.push(r.clone());
                if i % 4 == 0 {
                    reviews.push(r); // a producer retry
                }
                board.apply(e, name == "pts");
                board.held.remove(&e.id);
            } else if i % 3 == 0 {
                reviews.push(review("review_rejected", name, e));
                reviews.push(review("review_approved", name, e)); // decided already
                board.held.remove(&e.id);
            }
        }
        let stranger = Ev { id: uuid::Uuid::new_v4().to_string(), player: "p01".into(), score: 0, ts: 0 };
        reviews.push(review("review_approved", name, &stranger));
    }
    let admin_records: Vec<Record> = reviews.into_iter().map(admin_record).collect();
    stack.broker.produce(&admin, &admin_records).await;
    stack.broker.wait_committed_to_end(&cfg.group, &admin, 1, Duration::from_secs(120));
    assert_boards(&mut conn, &pts, &best, "after the reviews").await;
    assert_queues(&w, &pts, &best, "after the reviews").await;
    let refused: Vec<String> =
        stack.broker.read_all(&stack.dlq, 1).iter().map(|m| header(m, "rankflow.detail").unwrap_or_default()).collect();
    let (decided, unknown) = (
        refused.iter().filter(|d| d.contains("already rejected")).count(),
        refused.iter().filter(|d| d.contains("is held")).count(),
    );
    assert_eq!((decided + unknown, unknown), (refused.len(), 2), "{refused:?}");
    let p = &pts.held.values().next().expect("a pending event").player;
    let pending = pts.held.values().filter(|e| &e.player == p).count() as i64;
    let (_, read) = w.get_json(&format!("/v1/boards/pts/players/{p}?fresh=true")).await;
    assert_eq!(read["held"].as_i64(), Some(pending), "{read}");

    // A rebuild reproduces the boards and the queue.
    let out = run_rankflow(&["rebuild"], &w.config_path).await;
    assert!(out.status.success(), "rebuild: {}", String::from_utf8_lossy(&out.stderr));
    assert_boards(&mut conn, &pts, &best, "after a rebuild").await;
    assert_queues(&w, &pts, &best, "after a rebuild").await;
}
