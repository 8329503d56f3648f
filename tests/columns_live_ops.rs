//! Live ops on a board ranked by several columns, through a real worker,
//! Apache Kafka and Redis, scripted: splits (each region its own board), a season
//! window and a cron schedule beside the daily board, `max_attempts` (an attempt spent per
//! period; a producer retry spends none) and `rate_limit`, each row as its
//! own columns combine the events that count; and the live top, whose
//! first event is the top read.

use std::time::Duration;

use rdkafka::message::Message;
use serde_json::{json, Value};
use support::*;

const HOUR: i64 = 3_600_000;

/// (player, wins, time_ms) of each entry of a top read, in order.
fn rows(top: &Value) -> Vec<(String, i64, i64)> {
    let entries = top["entries"].as_array().unwrap_or_else(|| panic!("no entries: {top}"));
    entries
        .iter()
        .map(|e| {
            let s = &e["scores"];
            (e["player_id"].as_str().unwrap().into(), s["wins"].as_i64().unwrap(), s["time_ms"].as_i64().unwrap())
        })
        .collect()
}

fn want(list: &[(&str, i64, i64)]) -> Vec<(String, i64, i64)> {
    list.iter().map(|(p, w, t)| (p.to_string(), *w, *t)).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn splits_seasons_attempts_and_rate_limits_combine_rows_of_the_events_that_count() {
    let stack = Stack::start(1).await;
    let now = chrono::Utc::now().timestamp_millis();
    // Yesterday at ten: the season is its two hours.
    let from = now - now.rem_euclid(24 * HOUR) - 24 * HOUR + 10 * HOUR;
    let rfc = |ms: i64| chrono::DateTime::from_timestamp_millis(ms).unwrap().to_rfc3339();
    let boards = format!(
        r#"
[[board]]
id = "arena"
on = ["match"]
columns = [{{ name = "wins", mode = "sum" }}, {{ name = "time_ms", mode = "min", order = "asc" }}]
periods = ["daily"]
split_by = "region"
max_attempts = 3
windows = [{{ name = "cup", from = "{}", to = "{}" }}]
schedules = [{{ name = "ten", cron = "0 10 * * *", duration = "1h" }}]

[[board]]
id = "limited"
on = ["run"]
columns = [{{ name = "wins", mode = "sum" }}, {{ name = "time_ms", mode = "min", order = "asc" }}]
periods = ["all_time"]
rate_limit = {{ events = 2, window = "60s" }}
"#,
        rfc(from),
        rfc(from + 2 * HOUR)
    );
    let event = |id: &str, kind: &str, player: &str, region: &str, wins: i64, time_ms: i64, ts: i64| {
        let v = json!({ "event_id": id, "type": kind, "player_id": player, "ts": ts,
                        "attrs": { "region": region }, "scores": { "wins": wins, "time_ms": time_ms } });
        (player.to_string(), v.to_string().into_bytes(), Some(now))
    };
    let id = |k: u128| uuid::Uuid::from_u128(k).to_string();
    let records = vec![
        // eu: alice's three attempts count (the retry of the first spends
        // none), her fourth is refused; bob plays outside the season.
        event(&id(1), "match", "alice", "eu", 1, 50_000, from + 60_000),
        event(&id(2), "match", "alice", "eu", 1, 45_000, from + 120_000),
        event(&id(1), "match", "alice", "eu", 1, 50_000, from + 60_000),
        event(&id(3), "match", "alice", "eu", 0, 40_000, from + 180_000),
        event(&id(4), "match", "alice", "eu", 5, 1_000, from + 240_000),
        event(&id(5), "match", "bob", "eu", 3, 60_000, from + 3 * HOUR),
        // us: its own board.
        event(&id(6), "match", "alice", "us", 1, 70_000, from + 60_000),
        // limited: two events a minute count, a third is refused.
        event(&id(7), "run", "carol", "", 1, 30_000, now - 3_000),
        event(&id(8), "run", "carol", "", 1, 20_000, now - 2_000),
        event(&id(9), "run", "carol", "", 1, 10_000, now - 1_000),
    ];
    stack.broker.produce(&stack.topic, &records).await;
    let cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, &boards);
    let w = Worker::spawn(&cfg);
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 1, Duration::from_secs(60));
    let day = chrono::DateTime::from_timestamp_millis(from).unwrap().format("d:%Y-%m-%d").to_string();
    let w = &w;
    let top = |path: String| async move {
        let (status, body) = w.get_json(&path).await;
        assert_eq!(status, 200, "{path}: {body}");
        rows(&body)
    };
    let eu_day = top(format!("/v1/boards/arena/top?split=eu&period={day}")).await;
    assert_eq!(eu_day, want(&[("bob", 3, 60_000), ("alice", 2, 40_000)]), "{}", w.log());
    let eu_cup = top("/v1/boards/arena/top?split=eu&period=cup".into()).await;
    assert_eq!(eu_cup, want(&[("alice", 2, 40_000)]));
    // The scheduled hour (each day at ten) holds the same events as the cup.
    let ten = chrono::DateTime::from_timestamp_millis(from).unwrap().format("c:ten:%Y-%m-%dT%H:%M").to_string();
    assert_eq!(top(format!("/v1/boards/arena/top?split=eu&period={ten}")).await, want(&[("alice", 2, 40_000)]));
    assert_eq!(top(format!("/v1/boards/arena/top?split=us&period={ten}")).await, want(&[("alice", 1, 70_000)]));
    assert_eq!(top(format!("/v1/boards/arena/top?split=us&period={day}")).await, want(&[("alice", 1, 70_000)]));
    assert_eq!(top("/v1/boards/limited/top".into()).await, want(&[("carol", 2, 20_000)]));
    let reasons: Vec<String> =
        stack.broker.read_all(&stack.dlq, 1).iter().filter_map(|m| header(m, "rankflow.reason")).collect();
    assert_eq!(reasons, ["attempts_exhausted", "rate_limited"], "the fourth attempt and the third run");
    let dead: Vec<Value> = stack
        .broker
        .read_all(&stack.dlq, 1)
        .iter()
        .map(|m| serde_json::from_slice(m.payload().unwrap()).unwrap())
        .collect();
    assert_eq!((dead[0]["event_id"].clone(), dead[1]["event_id"].clone()), (json!(id(4)), json!(id(9))));

    // The live top's first event is the top read.
    let url = format!("http://127.0.0.1:{}/v1/boards/limited/live", w.http_port);
    let answer = tokio::task::block_in_place(|| support::curl::curl(&url, &["-N", "--max-time", "3"]));
    assert_eq!(answer.status, 200, "{}", answer.text());
    let body = answer.text();
    let first = body.lines().find_map(|l| l.strip_prefix("data:")).unwrap_or_else(|| panic!("no event: {body}"));
    let live: Value = serde_json::from_str(first.trim()).unwrap();
    assert_eq!(rows(&live), want(&[("carol", 2, 20_000)]));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_submission_outside_a_columns_bounds_is_refused_as_max_score_refuses() {
    let stack = Stack::start(1).await;
    let now = chrono::Utc::now().timestamp_millis();
    let boards = r#"
[[board]]
id = "speedrun"
on = ["run"]
row = "best"
columns = [{ name = "deaths", order = "asc", max = 99 }, { name = "time_ms", order = "asc", min = 1000, max = 3600000 }]
periods = ["all_time"]
"#;
    let id = |k: u128| uuid::Uuid::from_u128(k).to_string();
    let event = |k: u128, player: &str, deaths: i64, time_ms: i64| {
        let v = json!({ "event_id": id(k), "type": "run", "player_id": player, "ts": now,
                        "scores": { "deaths": deaths, "time_ms": time_ms } });
        (player.to_string(), v.to_string().into_bytes(), Some(now))
    };
    let records = vec![
        event(1, "alice", 2, 95_000),
        // A time under the column's min: refused, alice keeps her run.
        event(2, "alice", 0, 500),
        event(3, "bob", 1, 1_000),       // the bound itself counts
        event(4, "carol", 100, 80_000),  // deaths over the max
        event(5, "carol", 3, 3_600_001), // a time over the max
        event(6, "carol", 3, 3_600_000),
    ];
    stack.broker.produce(&stack.topic, &records).await;
    let cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, boards);
    let w = Worker::spawn(&cfg);
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 1, Duration::from_secs(60));
    let (status, body) = w.get_json("/v1/boards/speedrun/top").await;
    assert_eq!(status, 200, "{body}");
    let entries: Vec<(String, i64, i64)> = body["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("no entries: {body}"))
        .iter()
        .map(|e| {
            (
                e["player_id"].as_str().unwrap().into(),
                e["scores"]["deaths"].as_i64().unwrap(),
                e["scores"]["time_ms"].as_i64().unwrap(),
            )
        })
        .collect();
    let want = [("bob", 1, 1_000), ("alice", 2, 95_000), ("carol", 3, 3_600_000)];
    assert_eq!(entries, want.map(|(p, d, t)| (p.to_string(), d, t)), "{}", w.log());
    let dead = stack.broker.read_all(&stack.dlq, 1);
    let got: Vec<(Value, String, String)> = dead
        .iter()
        .map(|m| {
            let body: Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
            (
                body["event_id"].clone(),
                header(m, "rankflow.reason").unwrap(),
                header(m, "rankflow.detail").unwrap_or_default(),
            )
        })
        .collect();
    let ids: Vec<Value> = got.iter().map(|g| g.0.clone()).collect();
    assert_eq!(ids, [json!(id(2)), json!(id(4)), json!(id(5))], "{got:?}");
    assert!(got.iter().all(|g| g.1 == "score_out_of_range"), "{got:?}");
    let details: Vec<&str> = got.iter().map(|g| g.2.as_str()).collect();
    assert!(details[0].contains("scores.time_ms 500 is below the column's min 1000"), "{details:?}");
    assert!(details[1].contains("scores.deaths 100 is above the column's max 99"), "{details:?}");
    assert!(details[2].contains("scores.time_ms 3600001 is above the column's max 3600000"), "{details:?}");
}
