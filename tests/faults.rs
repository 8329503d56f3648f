//! The fault suite of the exactly-once guarantee: each scenario runs the real worker
//! against Apache Kafka and redis-server, injects a fault, and checks the
//! boards against the independent model of `support/stream.rs`. A killed
//! worker is started again in the same group, as an operator's restart
//! would: it takes its partitions back once the killed member's session
//! has expired.

use std::time::{Duration, Instant};

use rand::Rng;
use support::stream::{self, Stream, BOARDS};
use support::*;

const PARTITIONS: i32 = 4;

struct Setup {
    redis: Redis,
    broker: Broker,
    topic: String,
    dlq: String,
    stream: Stream,
}

async fn setup(records: usize, seed: u64, redis: Redis) -> Setup {
    setup_stream(stream::generate(records, seed), redis).await
}

async fn setup_stream(stream: Stream, redis: Redis) -> Setup {
    let Stack { redis, broker, topic, dlq } = Stack::start_with(redis, PARTITIONS).await;
    setup_on(stream, redis, broker, topic, dlq).await
}

/// A setup whose broker is the test's own (it stops or restarts it).
async fn setup_own_broker(records: usize, seed: u64) -> Setup {
    let Stack { redis, broker, topic, dlq } = Stack::start_on(Redis::start(), Broker::start_own(), PARTITIONS).await;
    setup_on(stream::generate(records, seed), redis, broker, topic, dlq).await
}

async fn setup_on(stream: Stream, redis: Redis, broker: Broker, topic: String, dlq: String) -> Setup {
    broker.produce(&topic, &stream.records).await;
    Setup { redis, broker, topic, dlq, stream }
}

fn committed_total(s: &Setup, group: &str) -> i64 {
    s.broker.committed(group, &s.topic, PARTITIONS).iter().filter(|o| **o > 0).sum()
}

/// Waits until `group` has committed more than `at_least` records in all.
fn wait_committed_past(s: &Setup, group: &str, at_least: i64, worker: &Worker) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let c = committed_total(s, group);
        if c > at_least {
            return c;
        }
        assert!(
            c < total(s),
            "the stream ended before the step that waits for progress past {at_least}: make it longer"
        );
        assert!(Instant::now() < deadline, "no progress past {at_least} (committed {c})\n{}", worker.log());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `bonus` event worth 1 point, keyed `key`, at event and record time `ts`.
fn bonus(key: &str, player: &str, ts: i64) -> (String, Vec<u8>, Option<i64>) {
    let v = serde_json::json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "bonus", "player_id": player, "score": 1, "ts": ts});
    (key.to_string(), v.to_string().into_bytes(), Some(ts))
}

fn total(s: &Setup) -> i64 {
    s.stream.records.len() as i64
}

#[tokio::test(flavor = "multi_thread")]
async fn five_sigkills_at_random_moments_of_a_100k_stream_leave_the_boards_exact() {
    let s = setup(100_000, 101, Redis::start()).await;
    let mut cfg = WorkerConfig::new(&s.broker, &s.redis, &s.topic, &s.dlq, BOARDS);
    cfg.worker_section = "batch_size = 300\nmax_backoff = \"1s\"\n".into();
    let mut rng = rand::rng();
    let mut conn = s.redis.conn().await;
    // Progress is read from what Redis has applied (the tags' recorded
    // offsets), not from the group's commits, which move a second at a
    // time: a fast worker can apply the rest of the stream between two.
    let mut last = 0;
    for kill in 0..5 {
        let mut w = Worker::spawn(&cfg);
        let deadline = Instant::now() + Duration::from_secs(120);
        while applied(&mut conn, &s.topic).await <= last {
            assert!(Instant::now() < deadline, "no progress past {last} after restart {kill}\n{}", w.log());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // A random moment once the worker is applying again, brought forward
        // if the worker gets through its share of what is left (so that
        // however fast it runs, every kill lands inside the stream).
        let moment = Instant::now() + Duration::from_millis(rng.random_range(50..1500));
        let share = last + (total(&s) - last) / (6 - kill);
        while Instant::now() < moment && applied(&mut conn, &s.topic).await < share {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        w.sigkill();
        let at_kill = committed_total(&s, &cfg.group);
        assert!(at_kill < total(&s), "kill {kill} landed after the stream ended; the stream must outlast five kills");
        last = applied(&mut conn, &s.topic).await;
    }
    let _w = Worker::spawn(&cfg);
    s.broker.wait_committed_to_end(&cfg.group, &s.topic, PARTITIONS, Duration::from_secs(300));
    s.stream.assert_boards(&mut s.redis.conn().await).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_group_replaying_after_the_dedupe_ttl_changes_nothing() {
    // No producer retries in this stream: with a 1s dedupe_ttl, a retry that
    // arrives more than two seconds after its original rightly counts again
    // (markers are kept between one and two dedupe_ttl).
    let s = setup_stream(stream::generate_with(20_000, 102, 0.0), Redis::start()).await;
    let mut cfg = WorkerConfig::new(&s.broker, &s.redis, &s.topic, &s.dlq, BOARDS);
    cfg.redis_extra = "dedupe_ttl = \"1s\"".into();
    let mut w = Worker::spawn(&cfg);
    s.broker.wait_committed_to_end(&cfg.group, &s.topic, PARTITIONS, Duration::from_secs(180));
    assert!(w.sigterm(Duration::from_secs(25)).is_some_and(|st| st.success()));
    let mut conn = s.redis.conn().await;
    s.stream.assert_boards(&mut conn).await;
    // Every dedupe marker has expired; a new group reads the topic from the start.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let markers: Vec<String> = redis::cmd("KEYS").arg("lb:*:_seen:*").query_async(&mut conn).await.unwrap();
    assert!(markers.is_empty(), "{} dedupe marker hashes outlived twice their 1s ttl", markers.len());
    cfg.group = random_name("replay");
    let w = Worker::spawn(&cfg);
    s.broker.wait_committed_to_end(&cfg.group, &s.topic, PARTITIONS, Duration::from_secs(180));
    s.stream.assert_boards(&mut conn).await;
    let (_, metrics) = w.http_get("/metrics").await;
    let redelivered: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("rankflow_events_duplicate_total") && l.contains("kind=\"offset\""))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum();
    assert!(redelivered >= s.stream.applied_records as f64, "the replay was recognised by offset ({redelivered})");
}

async fn workers_join_and_leave_under_load(strategy: &str, seed: u64) {
    // Long enough that the joins and the leave come while it is read, on a
    // machine where one worker applies 30,000 records a second.
    let s = setup(200_000, seed, Redis::start()).await;
    let mut cfg = WorkerConfig::new(&s.broker, &s.redis, &s.topic, &s.dlq, BOARDS);
    cfg.worker_section = "batch_size = 200\nmax_backoff = \"1s\"\n".into();
    cfg.extra_kafka_options.push(("partition.assignment.strategy".into(), strategy.into()));
    let w1 = Worker::spawn(&cfg);
    let c = wait_committed_past(&s, &cfg.group, 0, &w1);
    let mut w2 = Worker::spawn_with_port(&cfg, free_port());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let c = wait_committed_past(&s, &cfg.group, c, &w1);
    let w3 = Worker::spawn_with_port(&cfg, free_port());
    tokio::time::sleep(Duration::from_secs(2)).await;
    wait_committed_past(&s, &cfg.group, c, &w1);
    // The third worker's join completes with a rebalance, which can take
    // longer than the rest of the stream now takes to apply: wait for it, so
    // that the second worker leaves a group of three.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !w3.log().contains("Partitions assigned") {
        assert!(Instant::now() < deadline, "third worker was never assigned:\n{}", w3.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The second worker leaves while the others keep going.
    assert!(w2.sigterm(Duration::from_secs(25)).is_some_and(|st| st.success()), "{}", w2.log());
    s.broker.wait_committed_to_end(&cfg.group, &s.topic, PARTITIONS, Duration::from_secs(240));
    s.stream.assert_boards(&mut s.redis.conn().await).await;
    for (name, w) in [("first", &w1), ("third", &w3)] {
        assert!(w.log().contains("Partitions assigned"), "{name} worker was never assigned:\n{}", w.log());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_then_three_workers_join_and_leave_under_load_eager() {
    workers_join_and_leave_under_load("range", 103).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_then_three_workers_join_and_leave_under_load_cooperative_sticky() {
    workers_join_and_leave_under_load("cooperative-sticky", 104).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redis_restart_and_a_20s_outage_lose_nothing_and_commit_nothing_meanwhile() {
    // appendfsync always: a restarted Redis keeps everything it acknowledged.
    let redis = Redis::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut s = setup(60_000, 105, redis).await;
    let mut cfg = WorkerConfig::new(&s.broker, &s.redis, &s.topic, &s.dlq, BOARDS);
    cfg.worker_section = "batch_size = 200\nmax_backoff = \"2s\"\n".into();
    let w = Worker::spawn(&cfg);
    wait_committed_past(&s, &cfg.group, total(&s) / 5, &w);
    s.redis.stop();
    // Let the commit of the last acknowledged batch land (auto-commit runs every second).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = s.broker.committed(&cfg.group, &s.topic, PARTITIONS);
    let mut peak_rss = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(20) {
        peak_rss = peak_rss.max(w.rss_kib());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let after = s.broker.committed(&cfg.group, &s.topic, PARTITIONS);
    assert_eq!(before, after, "offsets were committed while Redis was down");
    assert!(before.iter().sum::<i64>() < total(&s), "the outage must come mid-stream");
    assert!(peak_rss < 200 * 1024, "resident memory during the outage reached {peak_rss} KiB (bound: 200 MiB)");
    s.redis.restart();
    s.broker.wait_committed_to_end(&cfg.group, &s.topic, PARTITIONS, Duration::from_secs(240));
    s.stream.assert_boards(&mut s.redis.conn().await).await;
    assert!(w.log().contains("Recovered"), "the worker logged its recovery:\n{}", w.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broker_restart_mid_stream_loses_nothing() {
    let mut s = setup_own_broker(60_000, 106).await;
    let mut cfg = WorkerConfig::new(&s.broker, &s.redis, &s.topic, &s.dlq, BOARDS);
    cfg.worker_section = "batch_size = 200\nmax_backoff = \"1s\"\n".into();
    let w = Worker::spawn(&cfg);
    wait_committed_past(&s, &cfg.group, total(&s) / 5, &w);
    s.broker.restart();
    s.broker.wait_committed_to_end(&cfg.group, &s.topic, PARTITIONS, Duration::from_secs(240));
    s.stream.assert_boards(&mut s.redis.conn().await).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_mid_stream_exits_zero_in_time_and_commits_nothing_redis_lacks() {
    let s = setup(60_000, 107, Redis::start()).await;
    let mut cfg = WorkerConfig::new(&s.broker, &s.redis, &s.topic, &s.dlq, BOARDS);
    cfg.worker_section = "batch_size = 200\nshutdown_timeout = \"10s\"\n".into();
    let mut w = Worker::spawn(&cfg);
    // Paced by what Redis has applied, not by the group's commits, which
    // trail it by up to a second: on a fast machine the whole stream is
    // applied within that second.
    let mut conn = s.redis.conn().await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while applied(&mut conn, &s.topic).await < total(&s) / 5 {
        assert!(Instant::now() < deadline, "no progress before SIGTERM\n{}", w.log());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = Instant::now();
    let status = w.sigterm(Duration::from_secs(30)).expect("rankflow exits after SIGTERM");
    assert!(status.success(), "exit status {status:?}\n{}", w.log());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "exit took {:?} (shutdown_timeout 10s)\n{}",
        started.elapsed(),
        w.log()
    );
    let committed = committed_total(&s, &cfg.group);
    assert!(committed < total(&s), "SIGTERM must come mid-stream");
    // Had an offset been committed past what Redis holds, resuming from the
    // committed offsets would skip those records and the boards would differ.
    let _w = Worker::spawn(&cfg);
    s.broker.wait_committed_to_end(&cfg.group, &s.topic, PARTITIONS, Duration::from_secs(240));
    s.stream.assert_boards(&mut s.redis.conn().await).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_poison_record_is_dead_lettered_and_an_unavailable_dead_letter_topic_holds_its_partition() {
    let redis = Redis::start();
    let broker = Broker::start();
    let topic = random_name("scores");
    let dlq = random_name("dlq-later");
    broker.create_topic(&topic, 1).await;
    let now = chrono::Utc::now().timestamp_millis();
    let mut records: Vec<_> = (0..2000).map(|i| bonus("k", &format!("p{}", i % 7), now)).collect();
    records[1000] = ("k".to_string(), b"{ poison".to_vec(), Some(now));
    broker.produce(&topic, &records).await;
    // The dead-letter topic does not exist yet: the poison cannot be dead-lettered.
    let cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, BOARDS);
    let w = Worker::spawn(&cfg);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !w.log().contains("dead-letter topic") {
        assert!(Instant::now() < deadline, "the worker never tried the dead-letter topic:\n{}", w.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let committed = broker.committed(&cfg.group, &topic, 1)[0];
    assert!(
        committed <= 1000,
        "committed {committed}, past the poison record at offset 1000 that is not dead-lettered"
    );
    let mut conn = redis.conn().await;
    // Once the topic exists the partition moves on, and every good record counts.
    broker.create_topic(&dlq, 1).await;
    broker.wait_committed_to_end(&cfg.group, &topic, 1, Duration::from_secs(120));
    let all: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg("lb:{points}:all")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(all.iter().map(|(_, s)| s).sum::<f64>(), 1999.0, "every record but the poison counted once");
    let dead = broker.read_all(&dlq, 1);
    assert_eq!(dead.len(), 1);
    use rdkafka::message::Message;
    let get = |k: &str| header(&dead[0], k);
    assert_eq!(get("rankflow.reason").as_deref(), Some("invalid_json"));
    assert_eq!(get("rankflow.source.offset").as_deref(), Some("1000"));
    assert_eq!(dead[0].payload(), Some(&b"{ poison"[..]));
}

/// Without transactions, a partition whose dead letter fails waits alone.
#[tokio::test(flavor = "multi_thread")]
async fn an_unwritable_dead_letter_topic_holds_only_the_partition_that_needs_it() {
    unwritable_dead_letter_topic(false).await;
}

/// With transactions, one transaction holds every partition's outputs: an
/// output topic that refuses its records holds them all (nothing committed
/// past the poison), and once it takes them, each is there once.
#[tokio::test(flavor = "multi_thread")]
async fn with_transactions_an_unwritable_dead_letter_topic_commits_nothing_past_the_poison() {
    unwritable_dead_letter_topic(true).await;
}

async fn unwritable_dead_letter_topic(transactions: bool) {
    let redis = Redis::start();
    let broker = Broker::start();
    let topic = random_name("scores");
    let dlq = random_name("dlq-later");
    broker.create_topic(&topic, 2).await;
    let now = chrono::Utc::now().timestamp_millis();
    let mut p0: Vec<_> = (0..1000).map(|_| bonus("zero", "zero", now)).collect();
    p0[500] = ("zero".to_string(), b"{ poison".to_vec(), Some(now));
    let p1: Vec<_> = (0..1000).map(|_| bonus("one", "one", now)).collect();
    broker.produce_to(&topic, 0, &p0).await;
    broker.produce_to(&topic, 1, &p1).await;
    let mut cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, BOARDS);
    cfg.worker_section = "batch_size = 100\nmax_backoff = \"1s\"\n".into();
    cfg.kafka_extra = format!("transactions = {transactions}");
    let w = Worker::spawn(&cfg);
    // Partition 1 needs no dead letter: it reaches its end while partition 0 waits at the poison.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let c = broker.committed(&cfg.group, &topic, 2);
        assert!(c[0] <= 500, "partition 0 committed {} past its poison record at 500", c[0]);
        if transactions || c[1] == 1000 {
            break;
        }
        assert!(Instant::now() < deadline, "partition 1 did not go on while partition 0 waited: {c:?}\n{}", w.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !w.log().contains("dead-letter topic") {
        assert!(Instant::now() < deadline, "the worker never reported the dead-letter topic:\n{}", w.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(broker.committed(&cfg.group, &topic, 2)[0] <= 500);
    if transactions {
        // Aborted and read again, with backoff, while the topic is missing.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(broker.committed(&cfg.group, &topic, 2)[0] <= 500);
        assert!(w.metric("rankflow_transactions_total", &[("outcome", "aborted")]).await >= 1.0);
    }
    broker.create_topic(&dlq, 1).await;
    broker.wait_committed_to_end(&cfg.group, &topic, 2, Duration::from_secs(90));
    let mut conn = redis.conn().await;
    let all: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg("lb:{points}:all")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut conn)
        .await
        .unwrap();
    let all: std::collections::HashMap<String, f64> = all.into_iter().collect();
    assert_eq!(all.get("zero"), Some(&999.0));
    assert_eq!(all.get("one"), Some(&1000.0));
    assert_eq!(broker.read_all(&dlq, 1).len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_workers_on_a_three_master_redis_cluster_are_exact() {
    let cluster = RedisCluster::start(3);
    let broker = Broker::start();
    let (topic, dlq) = broker.topics(PARTITIONS).await;
    let s = stream::generate(20_000, 108);
    let cfg = WorkerConfig::on_cluster(&broker, &cluster, &topic, &dlq, BOARDS);
    let w1 = Worker::spawn(&cfg);
    let w2 = Worker::spawn_with_port(&cfg, free_port());
    // Both workers hold partitions before the stream starts, so that both
    // write to the cluster (on a fast machine one worker alone drained the
    // stream before the second had joined).
    for w in [&w1, &w2] {
        wait_http(w.http_port, Duration::from_secs(30)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let mut held = Vec::new();
        for w in [&w1, &w2] {
            held.push(w.metric("rankflow_assigned_partitions", &[]).await);
        }
        if held.iter().all(|&n| n > 0.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the group never gave both workers partitions in 90 s (held: {held:?}): a broker group stall, \
             not an outcome of rankflow's\nfirst:\n{}\nsecond:\n{}",
            w1.log(),
            w2.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    broker.produce(&topic, &s.records).await;
    broker.wait_committed_to_end(&cfg.group, &topic, PARTITIONS, Duration::from_secs(240));
    let (actual, holding) = cluster.board_keys(stream::PREFIX).await;
    s.assert_board_contents(&actual);
    assert!(holding >= 2, "boards should spread across nodes, {holding} node(s) hold them");
    // Reads work against the cluster too.
    let (status, body) = w1.http_get("/v1/boards/points/top?limit=3").await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_with_the_broker_gone_still_exits_zero_within_the_shutdown_timeout() {
    let s = setup_own_broker(2_000, 109).await;
    let mut cfg = WorkerConfig::new(&s.broker, &s.redis, &s.topic, &s.dlq, BOARDS);
    cfg.worker_section = "shutdown_timeout = \"5s\"\n".into();
    let mut w = Worker::spawn(&cfg);
    s.broker.wait_committed_to_end(&cfg.group, &s.topic, PARTITIONS, Duration::from_secs(60));
    let mut s = s;
    s.broker.stop();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    let Some(status) = w.sigterm(Duration::from_secs(30)) else {
        panic!("rankflow did not exit within 30 s of SIGTERM with the broker gone\n{}", w.log())
    };
    assert!(status.success(), "exit status {status:?}\n{}", w.log());
    assert!(started.elapsed() < Duration::from_secs(8), "exit took {:?} (shutdown_timeout 5s)", started.elapsed());
}
