//! Redis that lost its data while records keep arriving on 4 partitions:
//! from the moment it comes back empty, no board key appears in it and, once
//! the loss is reported, no committed offset moves on any partition, whether
//! the loss meets new batches or a batch already in flight, on a single Redis
//! restarted or flushed, or on one primary of a cluster. After the documented recovery
//! (`rankflow rebuild`, then a restart) the boards equal the model over every
//! record; after `rankflow accept-loss` the workers go on from the commits.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::stream::{self, BOARDS};
use support::*;

const PARTITIONS: i32 = 4;

/// Batches of 200 records in calls of at most 50 events, so that a batch
/// is always on its way to Redis while the stream goes on.
const UNDER_LOAD: &str =
    "batch_size = 200\nmax_events_per_call = 50\nshutdown_timeout = \"20s\"\nmax_backoff = \"300ms\"\n";

/// How long the test watches Redis and the commits after a loss: with
/// `max_backoff` at 300 ms (`UNDER_LOAD`), over thirty of the worker's tries.
const WATCH: Duration = Duration::from_secs(10);

/// How soon the worker must report the loss.
const REPORTED_WITHIN: Duration = Duration::from_secs(30);

/// The board keys (not rankflow's own) on one connection.
async fn board_key_names(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    board_keys(conn, stream::PREFIX).await.into_keys().collect()
}

/// From a loss on: for [`WATCH`] after the worker reports it, every 200 ms,
/// no board key is in `conn`'s Redis, and the commits do not move from
/// where they stood three seconds after the report (offsets stored before
/// the loss may still be committed until then). Returns the readiness body.
async fn assert_nothing_written(
    conn: &mut redis::aio::MultiplexedConnection,
    w: &Worker,
    broker: &Broker,
    cfg: &WorkerConfig,
) -> serde_json::Value {
    let started = Instant::now();
    let mut reported: Option<(Instant, serde_json::Value)> = None;
    let mut commits: Option<Vec<i64>> = None;
    loop {
        let keys = board_key_names(conn).await;
        assert!(keys.is_empty(), "a board was written after Redis lost its data: {keys:?}\n{}", w.log());
        match &reported {
            None => {
                let (status, body) = w.get_json("/readyz").await;
                if body["data_lost"] == true {
                    assert_eq!(status, 503, "{body}");
                    reported = Some((Instant::now(), body));
                } else {
                    assert!(started.elapsed() < REPORTED_WITHIN, "the lost data was not reported: {body}\n{}", w.log());
                }
            }
            Some((at, _)) if commits.is_none() && at.elapsed() > Duration::from_secs(3) => {
                commits = Some(broker.committed(&cfg.group, &cfg.topic, PARTITIONS));
            }
            Some((at, _)) if at.elapsed() > WATCH => break,
            Some(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let now = broker.committed(&cfg.group, &cfg.topic, PARTITIONS);
    assert_eq!(Some(now), commits, "an offset was committed past the loss\n{}", w.log());
    assert_eq!(w.metric("rankflow_redis_data_lost", &[]).await, 1.0);
    let (_, body) = reported.expect("reported");
    assert!(body["reason"].as_str().unwrap().contains("Redis lost data"), "{body}");
    body
}

/// Waits until the worker has recorded, in its group's deployment marker,
/// every offset the boards applied: the batch applied last is settled, and
/// the next one is not on its way yet, so that a loss now meets the next
/// batch's writes rather than the marker's check.
async fn wait_settled(conn: &mut redis::aio::MultiplexedConnection, group: &str, topic: &str) {
    let marker = format!("{}:{{.deploy}}:_applied:{group}", stream::PREFIX);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let recorded: HashMap<String, i64> = redis::cmd("HGETALL").arg(&marker).query_async(conn).await.unwrap();
        let applied = topic_offsets(conn, topic).await;
        if applied.iter().all(|(f, o)| recorded.get(f).is_some_and(|r| r > o)) {
            return;
        }
        assert!(Instant::now() < deadline, "the worker did not settle: {recorded:?} {applied:?}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// `rankflow <command> --config <config>`, which must succeed; its stdout.
async fn rankflow(command: &str, config: &std::path::Path) -> String {
    let out = run_rankflow(&[command], config).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "rankflow failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// The refusing worker stops on SIGTERM, committing nothing (the recovery
/// started from the commits as they stood); a new one (same group) drains
/// the topic.
async fn restart_and_drain(mut w: Worker, broker: &Broker, cfg: &WorkerConfig) -> Worker {
    let before = broker.committed(&cfg.group, &cfg.topic, PARTITIONS);
    assert!(w.sigterm(Duration::from_secs(25)).is_some_and(|st| st.success()), "{}", w.log());
    let after = broker.committed(&cfg.group, &cfg.topic, PARTITIONS);
    assert_eq!(after, before, "the refusing worker committed on its way out\n{}", w.log());
    let w = Worker::spawn(cfg);
    broker.wait_committed_to_end_or(&cfg.group, &cfg.topic, PARTITIONS, Duration::from_secs(120), &|| w.log());
    let (status, body) = w.get_json("/readyz").await;
    assert_eq!(status, 200, "{body}\n{}", w.log());
    w
}

/// How Redis loses its data in [`lose_data_under_load`].
#[derive(PartialEq)]
enum Loss {
    /// Restarted without persistence between two batches (the last one
    /// settled, the next one about to come).
    Restart,
    /// Restarted while an apply call is in Redis, held there by `CLIENT PAUSE WRITE`.
    RestartWithACallInFlight,
    /// `FLUSHALL` between two batches: the same server answers on, empty.
    Flush,
}

/// A stream of 12,000 records: the first 4,000 drained by a worker of
/// `cfg` (made `UNDER_LOAD`), the rest produced on a task of its own, up
/// to twenty seconds of them (a loaded machine's worker took more than
/// eight to reach the live stream) until the flag returned is set, then at
/// once; returned with the worker.
async fn drained_then_streaming(
    broker: &Broker,
    cfg: &mut WorkerConfig,
    s: &stream::Stream,
) -> (Worker, tokio::task::JoinHandle<()>, Arc<AtomicBool>) {
    let (first, rest) = s.records.split_at(4_000);
    broker.produce(&cfg.topic, first).await;
    cfg.worker_section = UNDER_LOAD.into();
    let w = Worker::spawn(cfg);
    broker.wait_committed_to_end(&cfg.group, &cfg.topic, PARTITIONS, Duration::from_secs(60));
    let hurry = Arc::new(AtomicBool::new(false));
    let producing =
        broker.produce_paced_until(&cfg.topic, rest.to_vec(), 100, Duration::from_millis(250), hurry.clone());
    (w, producing, hurry)
}

/// A worker draining a stream that is still being produced, 4 partitions,
/// calls of at most 50 events (so that a batch is always on its way), and
/// Redis losing its data mid-stream as `loss` says.
async fn lose_data_under_load(loss: Loss, seed: u64) {
    let Stack { mut redis, broker, topic, dlq } = Stack::start(PARTITIONS).await;
    let s = stream::generate(12_000, seed);
    let mut cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, BOARDS);
    let (w, producing, hurry) = drained_then_streaming(&broker, &mut cfg, &s).await;
    let mut conn = redis.conn().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while applied(&mut conn, &topic).await < 4_600 {
        assert!(Instant::now() < deadline, "the worker did not apply the live stream\n{}", w.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if loss != Loss::RestartWithACallInFlight {
        wait_settled(&mut conn, &cfg.group, &topic).await;
    } else {
        let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(20_000).arg("WRITE").query_async(&mut conn).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let clients: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut conn).await.unwrap();
            if clients.lines().any(|c| c.contains("cmd=evalsha") && c.contains("flags=b")) {
                break;
            }
            assert!(Instant::now() < deadline, "no apply call reached Redis while paused:\n{clients}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert!(!producing.is_finished(), "the stream ended before Redis lost its data (not mid-stream)");
    if loss == Loss::Flush {
        let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    } else {
        redis.restart();
    }
    let mut conn = redis.conn().await;
    let body = assert_nothing_written(&mut conn, &w, &broker, &cfg).await;
    assert!(body["reason"].as_str().unwrap().contains("while the worker ran"), "{body}");
    hurry.store(true, Ordering::Relaxed);
    producing.await.unwrap();

    // The documented recovery: a rebuild from the topic, then a restart.
    let out = rankflow("rebuild", &w.config_path).await;
    assert!(out.contains("rebuilt"), "{out}");
    let w = restart_and_drain(w, &broker, &cfg).await;
    s.assert_boards(&mut conn).await;
    drop(w);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redis_restarted_empty_under_load_takes_no_write_and_no_commit_until_rebuilt() {
    lose_data_under_load(Loss::Restart, 41).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_in_flight_when_redis_restarts_empty_writes_nothing_either() {
    lose_data_under_load(Loss::RestartWithACallInFlight, 43).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redis_flushed_under_load_takes_no_write_and_no_commit_until_rebuilt() {
    lose_data_under_load(Loss::Flush, 45).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn one_cluster_primary_restarted_empty_stops_every_partition_until_rebuilt() {
    let mut cluster = RedisCluster::start(3);
    let broker = Broker::start();
    let (topic, dlq) = broker.topics(PARTITIONS).await;
    let s = stream::generate(12_000, 47);
    let mut cfg = WorkerConfig::on_cluster(&broker, &cluster, &topic, &dlq, BOARDS);
    let (w, producing, hurry) = drained_then_streaming(&broker, &mut cfg, &s).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The primary of the busiest board (every match and bonus event writes it).
    let victim = cluster.master_of("lb:{points}:all");
    assert!(!producing.is_finished(), "the stream ended before the primary restarted (not mid-stream)");
    tokio::task::block_in_place(|| cluster.restart_empty(victim));
    let mut conn = cluster.node_conn(victim).await;
    assert_nothing_written(&mut conn, &w, &broker, &cfg).await;
    hurry.store(true, Ordering::Relaxed);
    producing.await.unwrap();

    let out = rankflow("rebuild", &w.config_path).await;
    assert!(out.contains("rebuilt"), "{out}");
    let w = restart_and_drain(w, &broker, &cfg).await;
    let (boards, _) = cluster.board_keys(stream::PREFIX).await;
    s.assert_board_contents(&boards);
    drop(w);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_accepted_loss_goes_on_from_the_commits_with_the_lost_scores_left_out() {
    let Stack { mut redis, broker, topic, dlq } = Stack::start(PARTITIONS).await;
    let before = stream::generate(2_000, 51);
    broker.produce(&topic, &before.records).await;
    let cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, BOARDS);
    let mut w = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, PARTITIONS, Duration::from_secs(60));
    assert!(w.sigterm(Duration::from_secs(25)).is_some_and(|st| st.success()));
    let commits: HashMap<i32, i64> = (0..PARTITIONS).zip(broker.committed(&cfg.group, &topic, PARTITIONS)).collect();

    // Redis comes back empty; the next worker refuses, and keeps refusing.
    redis.restart();
    let after = stream::generate(1_000, 52);
    broker.produce(&topic, &after.records).await;
    let w = Worker::spawn(&cfg);
    wait_http(w.http_port, Duration::from_secs(10)).await;
    let mut conn = redis.conn().await;
    assert_nothing_written(&mut conn, &w, &broker, &cfg).await;
    for (p, c) in broker.committed(&cfg.group, &topic, PARTITIONS).into_iter().enumerate() {
        assert_eq!(c, commits[&(p as i32)], "partition {p} moved");
    }

    // The operator accepts the loss: the next worker goes on from the
    // commits, and the boards hold exactly what came after them.
    let out = rankflow("accept-loss", &w.config_path).await;
    assert!(out.contains("accepted the loss"), "{out}");
    let _w = restart_and_drain(w, &broker, &cfg).await;
    after.assert_boards(&mut conn).await;
}
