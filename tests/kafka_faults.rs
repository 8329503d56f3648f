//! Faults only a real Kafka cluster has, through the real worker, with the
//! boards checked against the model of `support/stream.rs`: on three
//! brokers (replication factor 3, `min.insync.replicas` 2) the node leading
//! the most source partitions is SIGKILLed mid-stream and restarted, then
//! another; and a rebalance while three workers join and leave a group
//! under load, one SIGKILLed and one SIGTERMed. Records arrive while the
//! faults land (a paced producer), so every fault comes mid-stream. The
//! dead letters, produced in the transactions that commit their records,
//! are read committed: each once.

use std::time::{Duration, Instant};

use support::stream::{self, BOARDS};
use support::*;

const PARTITIONS: i32 = 4;

/// The node that leads the most partitions of `topic`, of those not in `spare`.
fn busiest_leader(broker: &Broker, topic: &str, spare: &[i32]) -> i32 {
    let leaders = broker.leaders(topic);
    let mut counts: Vec<(usize, i32)> =
        (1..=3).filter(|n| !spare.contains(n)).map(|n| (leaders.iter().filter(|l| **l == n).count(), n)).collect();
    counts.sort();
    counts.last().expect("a node to kill").1
}

#[tokio::test(flavor = "multi_thread")]
async fn the_source_partitions_leaders_killed_in_turn_leave_the_boards_and_dead_letters_exact() {
    let broker = Broker::start_cluster(3);
    let redis = Redis::start();
    let (topic, dlq) = broker.topics(PARTITIONS).await;
    let s = stream::generate(60_000, 801);
    let total = s.records.len() as i64;
    let mut cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, BOARDS);
    cfg.worker_section = "batch_size = 200\nmax_backoff = \"1s\"\n".into();
    let w = Worker::spawn(&cfg);
    // The stream is produced in three parts, the next one only after a
    // kill: however late a kill lands on a loaded host, the worker cannot
    // have applied past the part produced before it, so records are left
    // to apply with the node down (a paced stream produced whole ran out
    // before a slow kill, and "progress with the node down" never came).
    let (first, second) = (s.records.len() * 4 / 10, s.records.len() * 7 / 10);
    let parts = [&s.records[..first], &s.records[first..second], &s.records[second..]];
    let paced = |part: &[(String, Vec<u8>, Option<i64>)]| {
        broker.produce_paced(&topic, part.to_vec(), 1500, Duration::from_millis(400))
    };
    let mut producing = paced(parts[0]);
    let mut conn = redis.conn().await;
    let mut killed = Vec::new();
    for (step, share) in [(1, total / 10), (2, total / 2)] {
        wait_applied(&mut conn, &topic, share, &w, &format!("no progress before kill {step}")).await;
        let node = busiest_leader(&broker, &topic, &killed);
        broker.kill_node(node);
        let at_kill = applied(&mut conn, &topic).await;
        // The part being produced ends with the node down; the next one follows.
        producing.await.expect("the producer ran to the end of its part");
        producing = paced(parts[step]);
        // The worker goes on against the two nodes left.
        let more = at_kill + total / 20;
        let why = format!("no progress with node {node} down (applied {at_kill} at the kill, waiting for {more})");
        wait_applied(&mut conn, &topic, more, &w, &why).await;
        broker.start_node(node);
        broker.wait_in_sync(&[&topic, &dlq, "__consumer_offsets"], Duration::from_secs(120));
        killed.push(node);
    }
    producing.await.expect("the producer ran to its end");
    broker.wait_committed_to_end_or(&cfg.group, &topic, PARTITIONS, Duration::from_secs(240), &|| w.log());
    s.assert_boards(&mut conn).await;
    // Read committed, each dead letter once (kafka.transactions).
    s.assert_dead_letters(&broker.read_all(&dlq, 1), &topic);
    assert_eq!(killed.len(), 2, "two leaders were killed");
    assert_ne!(killed[0], killed[1], "the second kill is another node");
}

/// Waits until `worker` holds partitions (60 s at most).
async fn wait_assigned(worker: &Worker, name: &str) {
    wait_http(worker.http_port, Duration::from_secs(30)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while worker.metric("rankflow_assigned_partitions", &[]).await < 1.0 {
        assert!(Instant::now() < deadline, "the {name} worker was never assigned partitions:\n{}", worker.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn three_workers_join_and_leave_under_load_one_killed_one_stopped_and_the_boards_stay_exact() {
    let partitions = 6;
    let Stack { redis, broker, topic, dlq } = Stack::start(partitions).await;
    let s = stream::generate(90_000, 802);
    let total = s.records.len() as i64;
    let mut cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, BOARDS);
    cfg.worker_section = "batch_size = 200\nmax_backoff = \"1s\"\n".into();
    let producing = broker.produce_paced(&topic, s.records.clone(), 1500, Duration::from_millis(300));
    let mut conn = redis.conn().await;
    let w1 = Worker::spawn(&cfg);
    wait_applied(&mut conn, &topic, total / 10, &w1, "the first worker made no progress").await;
    let mut w2 = Worker::spawn_with_port(&cfg, free_port());
    wait_assigned(&w2, "second").await;
    let mut w3 = Worker::spawn_with_port(&cfg, free_port());
    wait_assigned(&w3, "third").await;
    let at = applied(&mut conn, &topic).await;
    wait_applied(&mut conn, &topic, at + total / 20, &w1, "no progress with three workers").await;
    // One leaves without a word, one leaves cleanly, both mid-stream.
    w2.sigkill();
    assert!(w3.sigterm(Duration::from_secs(25)).is_some_and(|st| st.success()), "{}", w3.log());
    let at = applied(&mut conn, &topic).await;
    assert!(at < total, "the workers must leave mid-stream (applied {at} of {total})");
    // The killed one comes back in the same group.
    let w4 = Worker::spawn_with_port(&cfg, free_port());
    wait_assigned(&w4, "restarted").await;
    producing.await.expect("the producer ran to its end");
    broker.wait_committed_to_end(&cfg.group, &topic, partitions, Duration::from_secs(240));
    s.assert_boards(&mut conn).await;
    // Read committed, each dead letter once (kafka.transactions).
    s.assert_dead_letters(&broker.read_all(&dlq, 1), &topic);
    for (name, w) in [("first", &w1), ("restarted", &w4)] {
        assert!(w.log().contains("Partitions assigned"), "the {name} worker was never assigned:\n{}", w.log());
    }
}
