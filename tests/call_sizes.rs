//! Apply calls sized by time (`worker.max_call_time`), through a real
//! worker, Apache Kafka and Redis: a board whose events cost Redis more per event
//! gets smaller calls than a cheap one, both within `max_events_per_call`;
//! a trickle of single events after the drain leaves the sizes as they were; and
//! the boards stay exact.

use std::time::Duration;

use serde_json::json;
use support::*;

const BOARDS: &str = r#"
[[board]]
id = "cheap"
on = ["match"]
mode = "sum"
periods = ["all_time"]
dense_rank = false

[[board]]
id = "costly"
on = ["match"]
mode = "best"
periods = ["hourly", "daily", "weekly", "monthly", "yearly", "all_time"]
meta = true
max_attempts = 1000000
rate_limit = { events = 1000000, window = "1h" }
split_by = "mode"
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_costlier_board_gets_smaller_calls_within_the_cap() {
    let stack = Stack::start(2).await;
    let now = chrono::Utc::now().timestamp_millis();
    let record = |i: i64| {
        let player = format!("p{}", i % 5000);
        let v = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "match", "player_id": player,
                       "score": i % 977, "ts": now - 1000, "attrs": {"mode": "duo"}, "meta": {"n": "x"}});
        (player, v.to_string().into_bytes(), Some(now))
    };
    let records: Vec<_> = (0..20_000).map(record).collect();
    stack.broker.produce(&stack.topic, &records).await;
    let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, BOARDS);
    cfg.worker_section =
        "batch_size = 2000\nmax_events_per_call = 500\nmax_call_time = \"2ms\"\nmax_backoff = \"1s\"\n".into();
    let w = Worker::spawn(&cfg);
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 2, Duration::from_secs(120));
    let sizes = || async {
        let m = samples(&http_get(w.http_port, "/metrics").await.1);
        let size = |board: &str| sum(&m, "rankflow_call_events", &[("board", board)]);
        (size("cheap"), size("costly"))
    };
    let (cheap, costly) = sizes().await;
    assert!(costly >= 1.0 && cheap <= 500.0, "within 1..=max_events_per_call: {:?}", (cheap, costly));
    assert!(costly < cheap, "the costlier board's calls are smaller: {:?}", (cheap, costly));
    // Live play after the drain: ten calls of one event each, mostly the
    // call's own share and whatever held Redis's thread, cannot be split
    // and leave the sizes as they were.
    for i in 20_000..20_010 {
        stack.broker.produce(&stack.topic, &[record(i)]).await;
        stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 2, Duration::from_secs(120));
    }
    let after = sizes().await;
    assert_eq!(after, (cheap, costly), "a trickle of single events leaves the call sizes");
    // And exact: every player's total on the cheap board.
    let mut conn = stack.redis.conn().await;
    let mut want: std::collections::BTreeMap<String, i64> = Default::default();
    for i in 0..20_010i64 {
        *want.entry(format!("p{}", i % 5000)).or_default() += i % 977;
    }
    assert_eq!(zset_values(&mut conn, "lb:{cheap}:all").await, want);
}
