//! End-to-end: a generated stream through Apache Kafka, the rankflow binary and a
//! real redis-server, checked against the independent model of
//! `support/stream.rs`.

use std::time::Duration;

use support::stream::{self, BOARDS};
use support::*;

const PARTITIONS: i32 = 4;

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_with_duplicates_and_bad_records_matches_the_model_exactly() {
    let Stack { redis, broker, topic, dlq } = Stack::start(PARTITIONS).await;
    let s = stream::generate(20_000, 42);
    assert!(s.dead.len() >= 150, "the stream carries about 1% bad records");
    broker.produce(&topic, &s.records).await;

    let cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, BOARDS);
    let mut worker = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, PARTITIONS, Duration::from_secs(180));

    let mut conn = redis.conn().await;
    s.assert_boards(&mut conn).await;
    s.assert_dead_letters(&broker.read_all(&dlq, 1), &topic);

    let status = worker.sigterm(Duration::from_secs(25)).expect("rankflow exits after SIGTERM");
    assert!(status.success(), "exit status {status:?}\n{}", worker.log());

    // The operator's command for a recreated topic forgets its recorded offsets.
    assert!(offsets_fields(&mut conn, &topic).await >= PARTITIONS as usize);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rankflow"))
        .args(["forget-offsets", "--config", worker.config_path.to_str().unwrap(), "--topic", &topic])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(offsets_fields(&mut conn, &topic).await, 0, "{}", String::from_utf8_lossy(&out.stdout));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_retried_after_one_board_tag_failed_counts_every_event_as_what_happened() {
    let Stack { redis, broker, topic, dlq } = Stack::start(2).await;
    let s = stream::generate(3_000, 7);
    let mut conn = redis.conn().await;
    // The `best` board's dedupe hashes (those of this week of Redis's clock,
    // of the one before and of the next: the default dedupe_ttl is 7d) are
    // strings: every call on that tag fails (WRONGTYPE) as it reads its
    // markers, before it writes anything, while the other tags' calls of the
    // same batches land.
    let (now, _): (String, String) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let week = now.parse::<u64>().unwrap() / (7 * 86400);
    let in_the_way: Vec<String> = (week - 1..=week + 1).map(|n| format!("lb:{{best}}:_seen:{n}")).collect();
    for key in &in_the_way {
        let _: () = redis::cmd("SET").arg(key).arg("in the way").query_async(&mut conn).await.unwrap();
    }
    broker.produce(&topic, &s.records).await;
    let cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, BOARDS);
    let w = Worker::spawn(&cfg);
    wait_http(w.http_port, Duration::from_secs(10)).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while w.metric("rankflow_redis_errors_total", &[("op", "apply")]).await < 2.0 {
        assert!(std::time::Instant::now() < deadline, "no failed apply:\n{}", w.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _: () = redis::cmd("DEL").arg(&in_the_way).query_async(&mut conn).await.unwrap();
    broker.wait_committed_to_end(&cfg.group, &topic, 2, Duration::from_secs(120));

    s.assert_boards(&mut conn).await;
    let m = samples(&w.http_get("/metrics").await.1);
    s.assert_board_counts(&m);
    // Nothing was redelivered: no event may count as one.
    assert_eq!(sum(&m, "rankflow_events_duplicate_total", &[("kind", "offset")]), 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_mid_stream_and_restarted_leaves_the_boards_exact() {
    let Stack { redis, broker, topic, dlq } = Stack::start(PARTITIONS).await;
    let s = stream::generate(20_000, 7);
    broker.produce(&topic, &s.records).await;

    let mut cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, BOARDS);
    cfg.worker_section = "batch_size = 100\nmax_backoff = \"1s\"\n".into();
    let mut conn = redis.conn().await;
    let total: i64 = s.records.len() as i64;
    for round in 0..2 {
        let mut worker = Worker::spawn(&cfg);
        // Kill once some, but not all, of the stream is applied. (Watching
        // Redis, not the commits: on a fast machine the worker applied the
        // whole stream within one auto-commit interval.)
        let part = total * (round + 1) / 4 + 1;
        wait_applied(&mut conn, &topic, part, &worker, &format!("no progress before the kill (round {round})")).await;
        worker.sigkill();
        let at_kill = applied(&mut conn, &topic).await;
        assert!(at_kill < total, "the kill must land mid-stream (applied {at_kill} of {total})");
    }
    let _worker = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, PARTITIONS, Duration::from_secs(180));
    s.assert_boards(&mut conn).await;
    // Dead letters go out in the transactions that commit their records'
    // offsets: a record dead-lettered before a kill whose transaction had not
    // committed is dead-lettered again, and only that copy is committed.
    let dead = broker.read_all(&dlq, 1);
    s.assert_dead_letters(&dead, &topic);
    assert_eq!(dead.len(), s.dead.len(), "each bad record dead-lettered exactly once");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_drained_backlog_is_committed_without_waiting_for_the_commit_interval() {
    drained_backlog_committed(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_drained_backlog_is_committed_by_a_transaction_on_going_idle() {
    drained_backlog_committed(true).await;
}

/// Without transactions, librdkafka's own commits would come ten minutes
/// apart: only the worker's commit on going idle can bring the group to the
/// log end. With them, the open transaction commits on going idle.
async fn drained_backlog_committed(transactions: bool) {
    let Stack { redis, broker, topic, dlq } = Stack::start(PARTITIONS).await;
    let s = stream::generate(3_000, 11);
    broker.produce(&topic, &s.records).await;

    let mut cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, BOARDS);
    cfg.extra_kafka_options.push(("auto.commit.interval.ms".into(), "600000".into()));
    cfg.kafka_extra = format!("transactions = {transactions}");
    let mut worker = Worker::spawn(&cfg);
    let mut conn = redis.conn().await;
    let total = s.records.len() as i64;
    let stalled = "the stream was not applied; if the log shows no assignment, the broker's group coordinator stalled";
    wait_applied(&mut conn, &topic, total, &worker, stalled).await;
    broker.wait_committed_to_end(&cfg.group, &topic, PARTITIONS, Duration::from_secs(60));
    s.assert_boards(&mut conn).await;
    // The idle commit's outcome is counted like librdkafka's own commits.
    let (family, label) = if transactions {
        ("rankflow_transactions_total", ("outcome", "committed"))
    } else {
        ("rankflow_commits_total", ("result", "ok"))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while worker.metric(family, &[label]).await < 1.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no successful commit counted:\n{}",
            worker.http_get("/metrics").await.1
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = worker.sigterm(Duration::from_secs(25)).expect("rankflow exits after SIGTERM");
    assert!(status.success(), "exit status {status:?}\n{}", worker.log());
}
