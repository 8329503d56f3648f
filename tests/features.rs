//! The seeds' other sorted-set systems, through the real worker: the
//! sliding-window rate limiter, top-K trimming and `latest` boards.

use std::collections::BTreeMap;
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
    event_record(kind, player, score, ts, record_ts, None)
}

fn map(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
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
    assert_eq!(zset_values(&mut conn, "lb:{limited}:all").await, map(&[("spammer", 1 + 2 + 4 + 16), ("calm", 100)]));
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
    assert_eq!(zset_values(&mut conn, "lb:{top3}:all").await, map(&[("r9", 100), ("r0", 95), ("r2", 90)]));
    let today = chrono::DateTime::from_timestamp_millis(t).unwrap().format("d:%Y-%m-%d").to_string();
    assert_eq!(
        zset_values(&mut conn, &format!("lb:{{top3}}:{today}")).await,
        map(&[("r9", 100), ("r0", 95), ("r2", 90)])
    );
    assert_eq!(zset_values(&mut conn, "lb:{top3asc}:all").await, map(&[("r1", 10), ("r5", 20), ("r3", 30)]));
    let mut dense: Vec<String> =
        redis::cmd("ZRANGE").arg("lb:{top3}:_dense:all").arg(0).arg(-1).query_async(&mut conn).await.unwrap();
    dense.sort();
    assert_eq!(dense, ["100", "90", "95"], "trimmed values leave the dense index");
    let (_, body) = w.http_get("/v1/boards/top3/top?rank=dense").await;
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["total"], 3);

    // Latest: an older event that arrives later changes nothing.
    assert_eq!(zset_values(&mut conn, "lb:{current}:all").await, map(&[("alice", 50), ("bob", 5)]));
}

const ERASURE_BOARDS: &str = r#"
[[board]]
id = "points"
on = ["match", "bonus"]
mode = "sum"
periods = ["daily", "weekly", "all_time"]

[[board]]
id = "best"
on = ["match"]
mode = "best"
periods = ["all_time"]
tie_break = "earliest"
rate_limit = { events = 100, window = "60s" }

[[board]]
id = "laps"
on = ["lap"]
mode = "best"
order = "asc"
periods = ["daily", "all_time"]
split_by = "track"

[[board]]
id = "current"
on = ["rating"]
mode = "latest"
periods = ["all_time"]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn an_erasure_leaves_no_trace_of_the_player_and_later_events_count_again() {
    let stack = Stack::start(1).await;
    let admin = stack.admin_topic().await;
    let Stack { redis, broker, topic, dlq } = stack;
    let now = chrono::Utc::now().timestamp_millis();
    let lap = |player: &str, ms: i64, track: &str| {
        let v = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "lap", "player_id": player, "score": ms, "ts": now, "attrs": {"track": track}});
        (player.to_string(), v.to_string().into_bytes(), Some(now))
    };
    let erase = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "player_erased", "player_id": "alice"});
    let records = vec![
        rec("match", "alice", 31, now - 1000, now),
        rec("match", "bob", 20, now - 1000, now),
        rec("match", "alice", 33, now - 86_400_000 * 2, now),
        rec("rating", "alice", 1700, now, now),
        rec("rating", "bob", 1500, now, now),
        lap("alice", 71_111, "monza"),
        lap("bob", 70_000, "monza"),
        lap("alice", 80_111, "spa"),
    ];
    // The scores, then the erasure (on the admin topic), then a later event.
    broker.produce(&topic, &records).await;
    let mut cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, ERASURE_BOARDS);
    cfg.admin_topics = vec![admin.clone()];
    let w = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, 1, Duration::from_secs(60));
    broker.produce(&admin, &[admin_record(erase)]).await;
    broker.wait_committed_to_end(&cfg.group, &admin, 1, Duration::from_secs(60));
    broker.produce(&topic, &[rec("bonus", "alice", 7, now, now)]).await;
    broker.wait_committed_to_end(&cfg.group, &topic, 1, Duration::from_secs(60));
    assert!(w.log().contains("Admin event applied") && w.log().contains("player_erased"), "{}", w.log());
    let mut conn = redis.conn().await;

    let keys: Vec<String> = redis::cmd("KEYS").arg("lb:*").query_async(&mut conn).await.unwrap();
    let today = chrono::DateTime::from_timestamp_millis(now).unwrap();
    let after: Vec<String> = vec!["lb:{points}:all".into(), format!("lb:{{points}}:{}", today.format("d:%Y-%m-%d")), {
        let iso = chrono::Datelike::iso_week(&today.date_naive());
        format!("lb:{{points}}:w:{:04}-W{:02}", iso.year(), iso.week())
    }];
    let mut traces = Vec::new();
    for k in &keys {
        let kind: String = redis::cmd("TYPE").arg(k).query_async(&mut conn).await.unwrap();
        let found = k.contains("alice")
            || match kind.as_str() {
                "zset" => {
                    let s: Option<f64> = redis::cmd("ZSCORE").arg(k).arg("alice").query_async(&mut conn).await.unwrap();
                    match s {
                        Some(7.0) if after.contains(k) => false,
                        Some(_) => true,
                        None => false,
                    }
                }
                "hash" => redis::cmd("HEXISTS").arg(k).arg("alice").query_async::<bool>(&mut conn).await.unwrap(),
                _ => false,
            };
        if found {
            traces.push(k.clone());
        }
    }
    assert!(traces.is_empty(), "alice is still in {traces:?}");
    // Her values leave the dense indexes; bob's stay; the event after the erasure counts.
    for (key, expected) in [
        ("lb:{points}:_dense:all", vec!["20", "7"]),
        ("lb:{laps:monza}:_dense:all", vec!["70000"]),
        ("lb:{current}:_dense:all", vec!["1500"]),
    ] {
        let mut d: Vec<String> = redis::cmd("ZRANGE").arg(key).arg(0).arg(-1).query_async(&mut conn).await.unwrap();
        d.sort();
        assert_eq!(d, expected, "{key}");
    }
    let spa: i64 = redis::cmd("EXISTS").arg("lb:{laps:spa}:all").query_async(&mut conn).await.unwrap();
    assert_eq!(spa, 0, "a board left empty by the erasure is gone");
    assert_eq!(zset_values(&mut conn, "lb:{points}:all").await, map(&[("alice", 7), ("bob", 20)]));
    assert_eq!(zset_values(&mut conn, "lb:{best}:all").await.keys().collect::<Vec<_>>(), vec!["bob"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_producer_retry_of_an_erasure_is_a_duplicate_and_keeps_the_points_earned_since() {
    let stack = Stack::start(1).await;
    let admin = stack.admin_topic().await;
    let Stack { redis, broker, topic, dlq } = stack;
    let now = chrono::Utc::now().timestamp_millis();
    let erase = admin_record(
        json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "player_erased", "player_id": "alice"}),
    );
    let mut cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, ERASURE_BOARDS);
    cfg.admin_topics = vec![admin.clone()];
    let w = Worker::spawn(&cfg);
    // In this order, each step applied before the next is produced: the
    // erasure is on the admin topic, ordered with the scores only by time.
    let steps = [
        (&topic, vec![rec("match", "alice", 31, now - 1000, now), rec("match", "bob", 20, now - 1000, now)]),
        (&admin, vec![erase.clone()]),
        (&topic, vec![rec("bonus", "alice", 7, now, now)]),
        // The producer retries the erasure: same event id, a later offset.
        (&admin, vec![erase]),
        (&topic, vec![rec("bonus", "alice", 5, now, now)]),
    ];
    for (t, records) in steps {
        broker.produce(t, &records).await;
        broker.wait_committed_to_end(&cfg.group, t, 1, Duration::from_secs(60));
    }
    let mut conn = redis.conn().await;
    assert_eq!(zset_values(&mut conn, "lb:{points}:all").await, map(&[("alice", 12), ("bob", 20)]), "{}", w.log());
    // `best` packs ties: only who is on it is compared.
    assert_eq!(zset_values(&mut conn, "lb:{best}:all").await.keys().collect::<Vec<_>>(), vec!["bob"]);
    assert!(w.log().contains("changed nothing"), "{}", w.log());
    // The tags were found through the registry of tags.
    let mut tags: Vec<String> = redis::cmd("SMEMBERS").arg("lb:{.tags}:_bases").query_async(&mut conn).await.unwrap();
    tags.sort();
    assert_eq!(tags, ["lb:{best}", "lb:{points}"]);
}
