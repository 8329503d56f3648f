//! Durability: with `redis.min_replicas = 1`, no offset is stored before a
//! batch's writes are on a replica. A frozen replica holds the commits back
//! (the writes are applied, their acknowledgement awaited and counted), and
//! its return lets them go on, with the boards exact.

use std::time::{Duration, Instant};

use support::stream::{self, BOARDS};
use support::*;

fn committed(broker: &Broker, group: &str, topic: &str) -> i64 {
    broker.committed(group, topic, 1).iter().filter(|o| **o > 0).sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn no_offset_is_committed_before_a_replica_has_the_writes() {
    let primary = Redis::start();
    let replica = Redis::start_with(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
    let Stack { redis, broker, topic, dlq } = Stack::start_with(primary, 1).await;
    // The replica is in sync before the worker starts.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let o = std::process::Command::new("redis-cli")
            .args(["-p", &replica.port.to_string(), "INFO", "replication"])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&o.stdout).contains("master_link_status:up") {
            break;
        }
        assert!(Instant::now() < deadline, "the replica did not sync");
        std::thread::sleep(Duration::from_millis(100));
    }
    let s = stream::generate(4_000, 31);
    let (first, second) = s.records.split_at(2_000);
    broker.produce(&topic, first).await;
    let mut cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, BOARDS);
    cfg.redis_extra = "min_replicas = 1\nreplica_wait = \"200ms\"".into();
    cfg.worker_section = "batch_size = 200\nmax_backoff = \"300ms\"\n".into();
    let w = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, 1, Duration::from_secs(60));

    // The replica freezes: writes still apply on the primary, commits stop.
    replica.pause();
    let before = committed(&broker, &cfg.group, &topic);
    broker.produce(&topic, second).await;
    let end: i64 = broker.log_end(&topic, 1).iter().sum();
    let mut conn = redis.conn().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while applied(&mut conn, &topic).await < end.min(before + 200) {
        assert!(Instant::now() < deadline, "the worker stopped applying\n{}", w.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        committed(&broker, &cfg.group, &topic),
        before,
        "an offset was committed before a replica had its writes"
    );
    assert!(w.metric("rankflow_redis_replica_wait_failures_total", &[]).await > 0.0);

    // Back: the acknowledgements come and the commits reach the end.
    replica.resume();
    broker.wait_committed_to_end(&cfg.group, &topic, 1, Duration::from_secs(60));
    s.assert_boards(&mut conn).await;
    drop(replica);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redis_that_came_back_empty_is_detected_and_nothing_is_consumed() {
    let Stack { mut redis, broker, topic, dlq } = Stack::start(1).await;
    let s = stream::generate(2_000, 33);
    broker.produce(&topic, &s.records).await;
    let cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, BOARDS);
    let mut w = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, 1, Duration::from_secs(60));
    assert!(w.sigterm(Duration::from_secs(25)).is_some_and(|st| st.success()));
    let before = committed(&broker, &cfg.group, &topic);
    assert!(before > 0);

    // Redis restarts without persistence: empty, while the group's commits stand.
    redis.restart();
    broker.produce(&topic, &stream::generate(100, 34).records).await;
    let w = Worker::spawn(&cfg);
    wait_http(w.http_port, Duration::from_secs(10)).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let ready = loop {
        let (status, body) = w.get_json("/readyz").await;
        if body["data_lost"] == true {
            break (status, body);
        }
        assert!(Instant::now() < deadline, "the lost data was not reported: {body}\n{}", w.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(ready.0, 503);
    assert!(ready.1["reason"].as_str().unwrap().contains("Redis lost data"), "{}", ready.1);
    assert_eq!(w.metric("rankflow_redis_data_lost", &[]).await, 1.0);
    assert!(w.log().contains("fewer applied records than the group committed"), "{}", w.log());
    // Nothing is consumed: no board is written and no offset committed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(committed(&broker, &cfg.group, &topic), before);
    let mut conn = redis.conn().await;
    let boards: Vec<String> = redis::cmd("KEYS").arg("lb:{*}:*").query_async(&mut conn).await.unwrap();
    assert!(boards.iter().all(|k| k.contains("{.")), "a board was written: {boards:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redis_that_restarts_empty_mid_stream_is_detected_at_the_next_batch() {
    let Stack { mut redis, broker, topic, dlq } = Stack::start_with(Redis::start(), 1).await;
    let s = stream::generate(4_000, 35);
    let (first, second) = s.records.split_at(2_000);
    broker.produce(&topic, first).await;
    let cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, BOARDS);
    let w = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, 1, Duration::from_secs(60));
    let before = committed(&broker, &cfg.group, &topic);

    // Redis restarts without persistence while the worker runs, and records go on arriving.
    redis.restart();
    broker.produce(&topic, second).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let (status, body) = loop {
        let (status, body) = w.get_json("/readyz").await;
        if body["data_lost"] == true {
            break (status, body);
        }
        assert!(Instant::now() < deadline, "the lost data was not reported: {body}\n{}", w.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status, 503);
    assert!(body["reason"].as_str().unwrap().contains("while the worker ran"), "{body}");
    assert_eq!(w.metric("rankflow_redis_data_lost", &[]).await, 1.0);
    // Nothing applied to the empty Redis is committed: the group stays where Redis lost it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(committed(&broker, &cfg.group, &topic), before, "offsets were committed past the loss");
}
