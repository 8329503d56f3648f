//! Entry metadata through the real worker, Apache Kafka and Redis: each board mode
//! keeps the `meta` of the event that explains the stored score (best: the
//! event that set the best, the first on a tie, through a lowered and then a
//! raised score; latest: the newest by event time; sum: the last applied),
//! producer retries and redeliveries change nothing, a bad `meta` is
//! dead-lettered `invalid_meta`, and every read carries the entry's meta.
//! (Sealed snapshots, published tops, rolling boards, top-K trimming and
//! erasure: tests/sealing.rs.)

use std::time::Duration;

use rdkafka::message::Message;
use serde_json::{json, Value};
use support::*;

const BOARDS: &str = r#"
[[board]]
id = "best"
on = ["match"]
mode = "best"
periods = ["all_time", "daily"]
meta = true

[[board]]
id = "last"
on = ["match"]
mode = "latest"
periods = ["all_time"]
meta = true

[[board]]
id = "total"
on = ["match"]
mode = "sum"
periods = ["all_time"]
tie_break = "earliest"
meta = true

[[board]]
id = "laps"
on = ["lap"]
mode = "best"
order = "asc"
periods = ["all_time"]
split_by = "track"
tie_break = "earliest"
meta = true

[[board]]
id = "plain"
on = ["match"]
mode = "best"
periods = ["all_time"]
"#;

/// A record of `player`'s event with `meta` (left out when `Value::Null`).
fn record(id: &str, kind: &str, player: &str, score: i64, ts: i64, meta: Value) -> (String, Vec<u8>, Option<i64>) {
    let mut v = json!({"event_id": id, "type": kind, "player_id": player, "score": score, "ts": ts,
                       "attrs": {"track": "monza"}});
    if !meta.is_null() {
        v["meta"] = meta;
    }
    (player.to_string(), v.to_string().into_bytes(), Some(ts))
}

fn id() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn tag(n: &str) -> Value {
    json!({ "name": n })
}

/// (player, score, meta) of a listing's entries.
fn rows(body: &Value) -> Vec<(String, i64, Value)> {
    body["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("no entries in {body}"))
        .iter()
        .map(|e| (e["player_id"].as_str().unwrap().to_string(), e["score"].as_i64().unwrap(), e["meta"].clone()))
        .collect()
}

fn row(player: &str, score: i64, meta: Value) -> (String, i64, Value) {
    (player.to_string(), score, meta)
}

/// Every read carries the meta: a player, around (filled), friends, cursor
/// pages, a split board; a board without meta answers none, and says so in
/// the board list. `best_rows` is the `best` board's top.
async fn every_read_carries_the_meta(w: &Worker, best_rows: &[(String, i64, Value)]) {
    let (_, me) = w.get_json("/v1/boards/best/players/bob").await;
    assert_eq!(me["meta"], tag("B-old"));
    let (_, around) = w.get_json("/v1/boards/best/players/alice/around?radius=1&fill=true").await;
    assert_eq!(rows(&around), best_rows[..3]);
    let (status, set) = w.post_json("/v1/boards/best/players", r#"{"players": ["dave", "zed", "bob"]}"#).await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(rows(&set), [row("bob", 80, tag("B-old")), row("dave", 60, Value::Null)]);
    assert!(set["entries"][1].get("meta").is_none(), "{set}");
    let (_, mut page) = w.get_json("/v1/boards/best/top?limit=1").await;
    let mut paged = rows(&page);
    while let Some(next) = page.get("next_cursor").and_then(Value::as_str) {
        page = w.get_json(&format!("/v1/boards/best/top?limit=1&cursor={next}")).await.1;
        paged.extend(rows(&page));
    }
    assert_eq!(paged, best_rows);
    let (_, laps) = w.get_json("/v1/boards/laps/top?split=monza").await;
    assert_eq!(rows(&laps), [row("alice", 71_000, json!({"car": "red"})), row("bob", 71_000, json!({"car": "blue"}))]);
    // A board without meta answers none, and says so in the board list.
    let (_, plain) = w.get_json("/v1/boards/plain/top").await;
    assert!(plain["entries"].as_array().unwrap().iter().all(|e| e.get("meta").is_none()), "{plain}");
    let (_, boards) = w.get_json("/v1/boards").await;
    let flags: Vec<(String, bool)> = boards["boards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["id"].as_str().unwrap().to_string(), b["meta"].as_bool().unwrap()))
        .collect();
    assert!(flags.contains(&("best".to_string(), true)) && flags.contains(&("plain".to_string(), false)));
}

/// The entries of each board's top (laps: the monza split).
async fn tops(w: &Worker) -> Vec<Value> {
    let mut out = Vec::new();
    for path in
        ["/v1/boards/best/top", "/v1/boards/last/top", "/v1/boards/total/top", "/v1/boards/laps/top?split=monza"]
    {
        out.push(w.get_json(path).await.1["entries"].clone());
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn each_mode_keeps_the_meta_of_the_event_that_explains_the_score_and_every_read_carries_it() {
    let stack = Stack::start(1).await;
    let now = chrono::Utc::now().timestamp_millis();
    let t = |back: i64| now - 60_000 + back;
    let (a1, a5) = (id(), id());
    let records = vec![
        // alice's best: 100 (A1), lowered to 90 (A2: no change), tied at 100
        // (A3: the first keeps it), raised to 120 (A4).
        record(&a1, "match", "alice", 100, t(1), tag("A1")),
        record(&id(), "match", "alice", 90, t(2), tag("A2")),
        record(&id(), "match", "alice", 100, t(3), tag("A3")),
        record(&id(), "match", "alice", 120, t(4), tag("A4")),
        // bob: newest by event time wins on "latest", whatever the order of arrival.
        record(&id(), "match", "bob", 70, t(20), tag("B-new")),
        record(&id(), "match", "bob", 80, t(10), tag("B-old")),
        // carol: no meta at all.
        record(&id(), "match", "carol", 110, t(5), Value::Null),
        // A producer retry of alice's first event (same id, later offset): a duplicate.
        record(&a1, "match", "alice", 100, t(1), tag("A1")),
        // dave: a raised best without meta clears the meta of the best it replaces.
        record(&a5, "match", "dave", 50, t(6), tag("D1")),
        record(&id(), "match", "dave", 60, t(7), Value::Null),
        // Bad meta: each dead-lettered, none applied anywhere.
        record(&id(), "match", "erin", 999, t(8), json!({ "name": 7 })),
        record(&id(), "match", "erin", 999, t(8), json!("Erin")),
        record(&id(), "match", "erin", 999, t(8), json!({ "name": "x".repeat(600) })),
        // Laps: ascending, earliest ties; bob equals alice's time later.
        record(&id(), "lap", "alice", 71_000, t(30), json!({ "car": "red" })),
        record(&id(), "lap", "bob", 71_000, t(31), json!({ "car": "blue" })),
        record(&id(), "lap", "alice", 72_000, t(32), json!({ "car": "slow" })),
    ];
    stack.broker.produce(&stack.topic, &records).await;
    let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, BOARDS);
    cfg.http_extra = "max_limit = 50".into();
    let w = Worker::spawn(&cfg);
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 1, Duration::from_secs(60));
    wait_http(w.http_port, Duration::from_secs(10)).await;

    let (status, best) = w.get_json("/v1/boards/best/top?limit=10").await;
    assert_eq!(status, 200, "{best}");
    let best_rows = vec![
        row("alice", 120, tag("A4")),
        row("carol", 110, Value::Null),
        row("bob", 80, tag("B-old")),
        row("dave", 60, Value::Null),
    ];
    assert_eq!(rows(&best), best_rows, "{}", w.log());
    assert!(best["entries"][1].get("meta").is_none(), "no meta is no field: {best}");
    // The daily period keeps its own, equal here.
    let at = chrono::DateTime::from_timestamp_millis(t(0)).unwrap().format("%Y-%m-%dT%H:%M:%SZ");
    let (_, daily) = w.get_json(&format!("/v1/boards/best/top?period=daily&at={at}&limit=10")).await;
    assert_eq!(rows(&daily), best_rows);

    let (_, last) = w.get_json("/v1/boards/last/top").await;
    assert_eq!(
        rows(&last),
        [
            row("alice", 120, tag("A4")),
            row("carol", 110, Value::Null),
            row("bob", 70, tag("B-new")),
            row("dave", 60, Value::Null)
        ]
    );
    // The retry of A1 did not count, and the last applied event explains the total.
    let (_, total) = w.get_json("/v1/boards/total/players/alice").await;
    assert_eq!((total["score"].clone(), total["meta"].clone()), (json!(410), tag("A4")), "{total}");
    let (_, total) = w.get_json("/v1/boards/total/players/bob").await;
    assert_eq!((total["score"].clone(), total["meta"].clone()), (json!(150), tag("B-old")));
    let (_, total) = w.get_json("/v1/boards/total/players/dave").await;
    assert!(total.get("meta").is_none(), "{total}");

    every_read_carries_the_meta(&w, &best_rows).await;

    // The three bad metas are dead-lettered invalid_meta; erin is on no board.
    let dead = stack.broker.read_all(&stack.dlq, 1);
    let reasons: Vec<Option<String>> = dead.iter().map(|m| header(m, "rankflow.reason")).collect();
    assert_eq!(reasons, vec![Some("invalid_meta".to_string()); 3], "{dead:?}");
    assert!(dead.iter().all(|m| m.payload().is_some_and(|p| String::from_utf8_lossy(p).contains("erin"))));
    let (status, _) = w.get_json("/v1/boards/best/players/erin").await;
    assert_eq!(status, 404);

    // Redelivery: a second group reads every record again; the recorded
    // offsets make each a no-op, so scores and metas stay as they are.
    let before = tops(&w).await;
    drop(w);
    let mut again = cfg.clone();
    again.group = random_name("group");
    let w = Worker::spawn(&again);
    stack.broker.wait_committed_to_end(&again.group, &stack.topic, 1, Duration::from_secs(60));
    wait_http(w.http_port, Duration::from_secs(10)).await;
    assert_eq!(tops(&w).await, before);
    // Then a later event without meta raises alice's best and clears its meta.
    stack.broker.produce(&stack.topic, &[record(&id(), "match", "alice", 150, t(40), Value::Null)]).await;
    stack.broker.wait_committed_to_end(&again.group, &stack.topic, 1, Duration::from_secs(60));
    let (_, me) = w.get_json("/v1/boards/best/players/alice").await;
    assert_eq!(me["score"], 150);
    assert!(me.get("meta").is_none(), "{me}");
    let mut conn = stack.redis.conn().await;
    let fields: Vec<String> = redis::cmd("HKEYS").arg("lb:{best}:_meta:all").query_async(&mut conn).await.unwrap();
    assert_eq!(fields, ["bob"], "only bob's best still has meta");
}
