//! The seeds' other sorted-set systems, through the real worker: the
//! sliding-window rate limiter, top-K trimming and `latest` boards.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;
use support::*;

const BOARDS: &str = r#"
[[board]]
id = "limited"
on = ["score"]
mode = "sum"
periods = ["all_time"]
rate_limit = { events = 2, window = "60s" }

[[board]]
id = "top3"
on = ["run"]
mode = "best"
periods = ["all_time", "daily"]
max_members = 3

[[board]]
id = "top3asc"
on = ["run"]
mode = "best"
order = "asc"
periods = ["all_time"]
max_members = 3

[[board]]
id = "current"
on = ["rating"]
mode = "latest"
periods = ["all_time"]
"#;

fn rec(kind: &str, player: &str, score: i64, ts: i64, record_ts: i64) -> (String, Vec<u8>, Option<i64>) {
    let v = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": kind, "player_id": player, "score": score, "ts": ts});
    (player.to_string(), v.to_string().into_bytes(), Some(record_ts))
}

async fn zset(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> HashMap<String, i64> {
    let v: Vec<(String, f64)> =
        redis::cmd("ZRANGE").arg(key).arg(0).arg(-1).arg("WITHSCORES").query_async(conn).await.unwrap();
    v.into_iter().map(|(m, s)| (m, s as i64)).collect()
}

fn map(pairs: &[(&str, i64)]) -> HashMap<String, i64> {
    pairs.iter().map(|(m, s)| (m.to_string(), *s)).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn rate_limits_top_k_and_latest_boards_hold_their_exact_expectations() {
    let Stack { redis, broker, topic, dlq } = Stack::start(1).await;
    let now = chrono::Utc::now().timestamp_millis();
    let t = now - 600_000;
    let mut records = vec![
        // The seeds' window fixture: 2 per 60 s, events at T-60000, T-59999, T, T, T+1.
        rec("score", "spammer", 1, t - 60_000, now),
        rec("score", "spammer", 2, t - 59_999, now),
        rec("score", "spammer", 4, t, now),
        rec("score", "spammer", 8, t, now),
        rec("score", "spammer", 16, t + 1, now),
        rec("score", "calm", 100, t, now),
    ];
    // Top-K: ten runners, then a trimmed one comes back with a better time.
    for (i, s) in [50, 10, 90, 30, 70, 20, 80, 60, 40, 100].iter().enumerate() {
        records.push(rec("run", &format!("r{i}"), *s, t, now));
    }
    records.push(rec("run", "r0", 95, t + 10, now));
    // Latest: alice's older rating arrives after her newer one; bob's newer, lower one wins.
    records.push(rec("rating", "alice", 50, t + 2000, now));
    records.push(rec("rating", "alice", 99, t + 1000, now));
    records.push(rec("rating", "bob", 10, t, now));
    records.push(rec("rating", "bob", 5, t + 5000, now));
    broker.produce(&topic, &records).await;

    let cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, BOARDS);
    let w = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, 1, Duration::from_secs(60));
    let mut conn = redis.conn().await;

    // First, second, third and fifth admitted; the fourth rejected.
    assert_eq!(zset(&mut conn, "lb:{limited}:all").await, map(&[("spammer", 1 + 2 + 4 + 16), ("calm", 100)]));
    let dead = broker.read_all(&dlq, 1);
    assert_eq!(dead.len(), 1, "only the fourth spammer event is dead-lettered");
    {
        use rdkafka::message::{Headers, Message};
        let h = dead[0].headers().unwrap();
        let reason = h.iter().find(|x| x.key == "rankflow.reason").and_then(|x| x.value).unwrap();
        assert_eq!(reason, b"rate_limited");
        let v: serde_json::Value = serde_json::from_slice(dead[0].payload().unwrap()).unwrap();
        assert_eq!(v["score"], 8);
    }
    // Memory is bounded by the limit: the window holds the admitted events of at most two windows.
    let window: i64 = redis::cmd("ZCARD").arg("lb:{limited}:_rl:spammer").query_async(&mut conn).await.unwrap();
    assert!(window <= 4, "{window}");

    // Top-K keeps exactly the best K, in each direction and each period.
    assert_eq!(zset(&mut conn, "lb:{top3}:all").await, map(&[("r9", 100), ("r0", 95), ("r2", 90)]));
    let today = chrono::DateTime::from_timestamp_millis(t).unwrap().format("d:%Y-%m-%d").to_string();
    assert_eq!(zset(&mut conn, &format!("lb:{{top3}}:{today}")).await, map(&[("r9", 100), ("r0", 95), ("r2", 90)]));
    assert_eq!(zset(&mut conn, "lb:{top3asc}:all").await, map(&[("r1", 10), ("r5", 20), ("r3", 30)]));
    let mut dense: Vec<String> =
        redis::cmd("ZRANGE").arg("lb:{top3}:_dense:all").arg(0).arg(-1).query_async(&mut conn).await.unwrap();
    dense.sort();
    assert_eq!(dense, ["100", "90", "95"], "trimmed values leave the dense index");
    let (_, body) = w.http_get("/v1/boards/top3/top?rank=dense").await;
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["total"], 3);

    // Latest: an older event that arrives later changes nothing.
    assert_eq!(zset(&mut conn, "lb:{current}:all").await, map(&[("alice", 50), ("bob", 5)]));
}
