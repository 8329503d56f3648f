//! Secure connections, end to end: Redis reachable only over mutual TLS
//! with its default user off, rankflow running as the restricted ACL user
//! `~lb:* &* +@all -@admin -@dangerous` (its password from a file), and a
//! broker that terminates TLS itself and checks SCRAM-SHA-512 and PLAIN
//! passwords.
//! The exactly-once pipeline runs there across SIGKILLs, on a single Redis
//! and a cluster; clients that are not rankflow (`redis-cli`, kafka-python)
//! read the boards and the dead letters back over TLS.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use support::stream::{self, BOARDS};
use support::tls::{self, Pki, KAFKA_ADMIN, KAFKA_ADMIN_PASSWORD, KAFKA_PASSWORD, REDIS_PASSWORD};
use support::*;

const PARTITIONS: i32 = 4;

/// Every record of `topic` read over SASL_SSL by kafka-python
/// (`tests/read_topic.py`), a client sharing no code with rankflow or
/// librdkafka: (key, `rankflow.reason` header) of each.
fn read_back(pki: &Pki, broker: &Broker, topic: &str, partitions: i32) -> Vec<(Option<String>, Option<String>)> {
    let out = Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/read_topic.py"))
        .args([&broker.brokers(), &pki.path("ca.crt").display().to_string(), KAFKA_ADMIN, KAFKA_ADMIN_PASSWORD])
        .args([topic, &partitions.to_string()])
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "read_topic.py: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            (v["key"].as_str().map(str::to_string), v["reason"].as_str().map(str::to_string))
        })
        .collect()
}

/// `redis-cli` over TLS as the restricted user: the all-time `best` board, highest first.
fn redis_cli_top(pki: &Pki, redis: &Redis) -> Vec<String> {
    let out = Command::new("redis-cli")
        .args(["--tls", "--cacert", &pki.path("ca.crt").display().to_string()])
        .args(["--cert", &pki.path("client.crt").display().to_string()])
        .args(["--key", &pki.path("client.key").display().to_string()])
        .args(["--user", tls::REDIS_USER, "--pass", REDIS_PASSWORD, "--no-auth-warning"])
        .args(["-p", &redis.port.to_string(), "ZRANGE", "lb:{best}:all", "0", "-1", "REV", "WITHSCORES"])
        .output()
        .unwrap();
    assert!(out.status.success(), "redis-cli: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn over_mutual_tls_and_sasl_every_score_counts_once_across_sigkills() {
    let pki = Arc::new(Pki::new());
    let redis = Redis::start_secured(pki.clone());
    let broker = Broker::start_secured(&pki);
    let (topic, dlq) = broker.topics(PARTITIONS).await;
    let s = stream::generate(30_000, 551);
    broker.produce(&topic, &s.records).await;

    let mut cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, BOARDS);
    pki.secure(&mut cfg, redis.worker_url());
    cfg.worker_section = "batch_size = 300\nmax_backoff = \"1s\"\n".into();
    let mut conn = redis.conn().await;
    let total = s.records.len() as i64;
    five_sigkills(&cfg, &mut conn, &[(topic.as_str(), PARTITIONS)], total, 551).await;
    let w = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, PARTITIONS, Duration::from_secs(300));
    s.assert_boards(&mut conn).await;
    // Dead letters go out in the transactions that commit their records: each once, read committed.
    let all = broker.read_all(&dlq, 1);
    s.assert_dead_letters(&all, &topic);

    // What clients that are not rankflow read back over TLS: the same records, copy for copy.
    let mut seen = read_back(&pki, &broker, &dlq, 1);
    let mut expected: Vec<_> = all.iter().map(|m| (key_of(m), header(m, "rankflow.reason"))).collect();
    seen.sort();
    expected.sort();
    assert_eq!(seen, expected, "kafka-python read every dead letter");
    let top = redis_cli_top(&pki, &redis);
    let model = &s.boards["lb:{best}:all"];
    assert_eq!(top.len(), model.len() * 2, "redis-cli sees every member of the best board");
    for pair in top.chunks(2) {
        assert_eq!(model.get(&pair[0]).map(|v| v.to_string()).as_deref(), Some(pair[1].as_str()), "{pair:?}");
    }
    assert!(!w.log().contains(REDIS_PASSWORD) && !w.log().contains(KAFKA_PASSWORD));
}

fn key_of(m: &rdkafka::message::OwnedMessage) -> Option<String> {
    use rdkafka::Message;
    m.key().map(|k| String::from_utf8_lossy(k).into_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_over_tls_applies_exactly_once_and_serves_reads_from_its_replicas() {
    let pki = Arc::new(Pki::new());
    let cluster = RedisCluster::start_secured(3, 1, Some(pki.clone()));
    let broker = Broker::start_secured(&pki);
    let (topic, dlq) = broker.topics(PARTITIONS).await;
    let s = stream::generate(30_000, 552);
    broker.produce(&topic, &s.records).await;
    let mut cfg = WorkerConfig::on_cluster(&broker, &cluster, &topic, &dlq, BOARDS);
    cfg.redis_extra = "cluster = true\nread_from = \"replica\"".into();
    pki.secure(&mut cfg, cluster.worker_url());
    // This worker authenticates with PLAIN (the other test's with SCRAM-SHA-512).
    for (k, v) in cfg.extra_kafka_options.iter_mut() {
        if k == "sasl.mechanism" {
            *v = "PLAIN".into();
        }
    }
    cfg.worker_section = "batch_size = 300\nmax_backoff = \"1s\"\n".into();

    // kill -9 mid-stream, then a restart in the same group.
    let total = s.records.len() as i64;
    let mut primaries = Vec::new();
    for node in cluster.primaries() {
        primaries.push(cluster.node_conn(node).await);
    }
    let mut w = Worker::spawn(&cfg);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while applied_on(&primaries, &topic).await < total / 4 {
        assert!(std::time::Instant::now() < deadline, "no progress\n{}", w.log());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    w.sigkill();
    assert!(applied_on(&primaries, &topic).await < total, "the kill must land mid-stream");
    let w = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, PARTITIONS, Duration::from_secs(180));
    let (boards, _) = cluster.board_keys(stream::PREFIX).await;
    s.assert_board_contents(&boards);
    s.assert_dead_letters(&broker.read_all(&dlq, 1), &topic);

    // Reads reach the replicas (over TLS, as the restricted user) once the
    // worker has learned them (every 10 s), and answer what the primaries do.
    cluster.wait_replicas_synced();
    let replica_reads =
        || cluster.replicas().iter().map(|&n| cluster.info_field(n, "commandstats", "cmdstat_evalsha_ro")).sum::<i64>();
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    let path = "/v1/boards/best/top?limit=20";
    while replica_reads() == 0 {
        assert!(std::time::Instant::now() < deadline, "no read reached a replica\n{}", w.log());
        let _ = w.http_get(path).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let (s1, from_replica) = w.get_json(path).await;
    let (s2, from_primary) = w.get_json(&format!("{path}&fresh=true")).await;
    assert_eq!((s1, s2), (200, 200), "{from_replica}");
    assert_eq!(from_replica, from_primary);
    let top = from_replica["entries"].as_array().expect("entries").clone();
    let model = &s.boards["lb:{best}:all"];
    assert_eq!(top.len(), model.len().min(20));
    for e in &top {
        assert_eq!(model.get(e["player_id"].as_str().unwrap()).copied(), e["score"].as_i64(), "{e}");
    }
    let (_, m) = w.http_get("/metrics").await;
    assert_eq!(sum(&samples(&m), "rankflow_replica_read_fallbacks_total", &[]), 0.0);
}
