//! Reads from replicas (`redis.read_from = "replica"`), through a real
//! worker, Apache Kafka and Redis: once replication has caught up, every read kind
//! answers from a replica exactly what the primary answers (`fresh=true`),
//! on single and sharded boards, sealed snapshots and the period listing; a
//! replica paused by `CLIENT PAUSE` shows that `fresh` reads skip it and
//! the others fall back; a dead replica leaves every read answering from
//! the primary, counted and logged once; and on a Redis Cluster the reads go
//! to the replicas of the keys' nodes.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::periods::*;
use support::*;

const BOARDS: &str = r#"
[sealing]
topic = "SEALED"
idle_grace = "1s"
check_interval = "100ms"

[[board]]
id = "points"
on = ["match"]
mode = "sum"
periods = ["all_time", "hourly"]
close_after = "10m"
meta = true

[[board]]
id = "spread"
on = ["match"]
mode = "best"
periods = ["all_time"]
shards = 4
"#;

/// The reads a game client makes, each as (method, path, body).
fn reads(hour: &str) -> Vec<(&'static str, String, Option<String>)> {
    let mut out = Vec::new();
    for board in ["points", "spread"] {
        out.push(("GET", format!("/v1/boards/{board}/top?limit=7"), None));
        out.push(("GET", format!("/v1/boards/{board}/top?limit=5&offset=9&rank=competition"), None));
        out.push(("GET", format!("/v1/boards/{board}/players/p7"), None));
        out.push(("GET", format!("/v1/boards/{board}/players/p7/around?radius=3&fill=true"), None));
        out.push(("GET", format!("/v1/boards/{board}/rank-of?score=300"), None));
        out.push(("GET", format!("/v1/boards/{board}/periods"), None));
        let friends = json!({"players": ["p1", "p2", "p30", "nobody"]}).to_string();
        out.push(("POST", format!("/v1/boards/{board}/players"), Some(friends)));
    }
    out.push(("GET", format!("/v1/boards/points/top?period={hour}:final&limit=5"), None));
    out.push(("GET", format!("/v1/boards/points/players/p3?period={hour}:final"), None));
    out
}

async fn read(port: u16, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    match method {
        "POST" => http_post(port, path, body.unwrap_or_default()).await,
        _ => http_get(port, path).await,
    }
}

/// `path` with `fresh=true`.
fn fresh(path: &str) -> String {
    format!("{path}{}fresh=true", if path.contains('?') { '&' } else { '?' })
}

/// A cursor's page after it, read the same way (cursors are part of what must match).
async fn cursor_pages(port: u16, board: &str, fresh_reads: bool) -> Vec<Value> {
    let mut out = Vec::new();
    let mut path = format!("/v1/boards/{board}/top?limit=6");
    for _ in 0..3 {
        let p = if fresh_reads { fresh(&path) } else { path.clone() };
        let (status, body) = http_get(port, &p).await;
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        out.push(v["entries"].clone());
        let Some(next) = v["next_cursor"].as_str() else { break };
        path = format!("/v1/boards/{board}/top?limit=6&cursor={next}");
    }
    out
}

fn info_field(url: &str, section: &str, field: &str) -> i64 {
    let out = std::process::Command::new("redis-cli").args(["-u", url, "INFO", section]).output().unwrap();
    info_number(&String::from_utf8_lossy(&out.stdout), field)
}

/// The script reads a node has run (`EVALSHA_RO` and `EVAL_RO` calls).
fn script_reads(url: &str) -> i64 {
    info_field(url, "commandstats", "cmdstat_evalsha_ro") + info_field(url, "commandstats", "cmdstat_eval_ro")
}

/// Waits until the replica at `replica` has everything the primary at `primary` has.
fn caught_up(primary: &str, replica: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (p, r) = (
            info_field(primary, "replication", "master_repl_offset"),
            info_field(replica, "replication", "slave_repl_offset"),
        );
        if p > 0 && p == r {
            return;
        }
        assert!(Instant::now() < deadline, "the replica stays behind: {r} of {p}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn fallbacks(metrics: &str) -> f64 {
    sum(&samples(metrics), "rankflow_replica_read_fallbacks_total", &[])
}

#[tokio::test(flavor = "multi_thread")]
async fn replica_reads_equal_primary_reads_fall_back_and_fresh_reads_skip_the_replica() {
    let stack = Stack::start(2).await;
    let replica = Redis::start_with(&["--replicaof", "127.0.0.1", &stack.redis.port.to_string()]);
    let sealed = stack.sealed_topic().await;
    let now = chrono::Utc::now().timestamp_millis();
    let past = now - now.rem_euclid(HOUR) - 3 * HOUR;
    let mut rng = Lcg(3);
    let records: Vec<_> = (0..3000)
        .map(|i| {
            let player = format!("p{}", rng.next(60));
            let ts = if i % 3 == 0 { past + 1000 + i } else { now - 1000 };
            let v = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "match", "player_id": player,
                           "score": 1 + rng.next(100), "ts": ts, "meta": {"name": format!("N{i}")}});
            (player, v.to_string().into_bytes(), Some(ts))
        })
        .collect();
    stack.broker.produce(&stack.topic, &records).await;
    let mut cfg =
        WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, &BOARDS.replace("SEALED", &sealed));
    cfg.redis_extra = format!("read_from = \"replica\"\nreplica_urls = [\"{}\"]", replica.url());
    let w = Worker::spawn(&cfg);
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 2, Duration::from_secs(60));
    wait_records(&stack.broker, &sealed, 1, Duration::from_secs(60), &|| w.log());
    caught_up(&stack.redis.url(), &replica.url());

    // Every read kind: the replica's answer is the primary's.
    let hour = hour_id(past);
    let before = script_reads(&replica.url());
    for (method, path, body) in reads(&hour) {
        let (s1, from_replica) = read(w.http_port, method, &path, body.as_deref()).await;
        let (s2, from_primary) = read(w.http_port, method, &fresh(&path), body.as_deref()).await;
        assert_eq!((s1, s2), (200, 200), "{path}: {from_replica} / {from_primary}");
        assert_eq!(from_replica, from_primary, "{method} {path}");
    }
    for board in ["points", "spread"] {
        assert_eq!(cursor_pages(w.http_port, board, false).await, cursor_pages(w.http_port, board, true).await);
    }
    assert!(script_reads(&replica.url()) > before, "the replica served the reads");
    let (_, m) = http_get(w.http_port, "/metrics").await;
    assert_eq!(fallbacks(&m), 0.0, "no read fell back");

    // A paused replica: a fresh read never meets it; another falls back to the primary.
    let _: () =
        redis::cmd("CLIENT").arg("PAUSE").arg(3000).arg("ALL").query_async(&mut replica.conn().await).await.unwrap();
    let (status, _) = http_get(w.http_port, "/v1/boards/points/players/p7?fresh=true").await;
    assert_eq!(status, 200);
    let (_, m) = http_get(w.http_port, "/metrics").await;
    assert_eq!(fallbacks(&m), 0.0, "a fresh read goes to the primary");
    let (status, body) = http_get(w.http_port, "/v1/boards/points/players/p7").await;
    assert_eq!(status, 200, "{body}");
    let (_, m) = http_get(w.http_port, "/metrics").await;
    assert_eq!(fallbacks(&m), 1.0, "a read the paused replica did not answer went to the primary");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (status, _) = http_get(w.http_port, "/v1/boards/points/players/p7").await;
    assert_eq!(status, 200);
    assert!(w.log().contains("A replica answers reads again"), "{}", w.log());

    // A dead replica: every read still answers, from the primary, logged once.
    drop(replica);
    for (method, path, body) in reads(&hour) {
        let (status, answer) = read(w.http_port, method, &path, body.as_deref()).await;
        let (_, from_primary) = read(w.http_port, method, &fresh(&path), body.as_deref()).await;
        assert_eq!((status, &answer), (200, &from_primary), "{path}");
    }
    let (_, m) = http_get(w.http_port, "/metrics").await;
    assert!(fallbacks(&m) >= reads(&hour).len() as f64, "{}", fallbacks(&m));
    let logged = w.log().matches("A replica did not answer a read").count();
    assert_eq!(logged, 2, "once for the pause, once for the outage:\n{}", w.log());
    // A bad `fresh` names itself.
    let (status, body) = http_get(w.http_port, "/v1/boards/points/top?fresh=maybe").await;
    assert_eq!((status, serde_json::from_str::<Value>(&body).unwrap()["parameter"].clone()), (400, json!("fresh")));
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_cluster_reads_go_to_the_replicas_of_the_keys_nodes() {
    let cluster = RedisCluster::start_with_replicas(3, 1);
    let broker = Broker::start();
    let (topic, dlq) = broker.topics(2).await;
    let now = chrono::Utc::now().timestamp_millis();
    let mut rng = Lcg(9);
    let records: Vec<_> = (0..3000)
        .map(|i| {
            let player = format!("p{}", rng.next(60));
            let v = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "match", "player_id": player,
                           "score": 1 + rng.next(100), "ts": now - 1000, "meta": {"name": format!("N{i}")}});
            (player, v.to_string().into_bytes(), Some(now))
        })
        .collect();
    broker.produce(&topic, &records).await;
    let boards = BOARDS.split("[[board]]").skip(1).map(|b| format!("[[board]]{b}")).collect::<String>();
    let boards = boards.replace("close_after = \"10m\"\n", "");
    let mut cfg = WorkerConfig::on_cluster(&broker, &cluster, &topic, &dlq, &boards);
    cfg.redis_extra = "cluster = true\nread_from = \"replica\"".into();
    let w = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, 2, Duration::from_secs(60));
    cluster.wait_replicas_synced();
    // A replica is in `CLUSTER SLOTS` once it has data, and the worker
    // learns the replicas again every 10 s: until then its reads go to the primaries.
    let deadline = Instant::now() + Duration::from_secs(40);
    let replica_reads = || {
        let all: i64 = cluster.urls().iter().map(|u| script_reads(u)).sum();
        all - cluster.primary_urls().iter().map(|u| script_reads(u)).sum::<i64>()
    };
    while replica_reads() == 0 {
        assert!(Instant::now() < deadline, "no read reached a replica\n{}", w.log());
        let _ = http_get(w.http_port, "/v1/boards/points/top").await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let before: i64 = cluster.urls().iter().map(|u| script_reads(u)).sum();
    let primaries_before: i64 = cluster.primary_urls().iter().map(|u| script_reads(u)).sum();
    for (method, path, body) in reads("unused").into_iter().filter(|(_, p, _)| !p.contains("final")) {
        let (s1, from_replica) = read(w.http_port, method, &path, body.as_deref()).await;
        let (s2, from_primary) = read(w.http_port, method, &fresh(&path), body.as_deref()).await;
        assert_eq!((s1, s2), (200, 200), "{path}: {from_replica}");
        assert_eq!(from_replica, from_primary, "{method} {path}");
    }
    let after: i64 = cluster.urls().iter().map(|u| script_reads(u)).sum();
    let primaries_after: i64 = cluster.primary_urls().iter().map(|u| script_reads(u)).sum();
    let on_replicas = (after - before) - (primaries_after - primaries_before);
    assert!(on_replicas > 0, "the replicas served reads ({on_replicas})\n{}", w.log());
    assert!(primaries_after - primaries_before > 0, "fresh reads went to the primaries");
    let (_, m) = http_get(w.http_port, "/metrics").await;
    assert_eq!(fallbacks(&m), 0.0);
}
