//! Every output exactly once (`kafka.transactions`), through the real
//! worker, Apache Kafka and Redis, read by independent clients.
//!
//! One stream (bad records, producer retries, scores an integrity rule
//! holds, a board with `notify_top` and hourly periods that seal) goes
//! through two deployments: one left alone, the model, and one killed -9
//! again and again while it works (each kill lands wherever the worker is:
//! reading, waiting for Redis, producing, committing). A `read_committed`
//! reader then finds every output of the killed one exactly once and equal
//! to the model's: dead letters (also held to the stream's own list of bad
//! records), rank changes, review records, the `player_hidden` events of
//! `hold_hides_after`, sealed tops. A `read_uncommitted` reader may see
//! copies from aborted transactions, but only copies: the same record under
//! the same `rankflow-output-id`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rdkafka::message::{Message, OwnedMessage};
use serde_json::json;
use support::periods::Lcg;
use support::*;

const HOUR: i64 = 3_600_000;

/// One topic's records as a `read_committed` reader finds them: output id -> (key, value).
type Outputs = BTreeMap<String, (Vec<u8>, Vec<u8>)>;

/// One deployment's output topics, and its config.
struct Deployment {
    redis: Redis,
    cfg: WorkerConfig,
    dlq: String,
    changes: String,
    review: String,
    admin: String,
    sealed: String,
}

async fn deployment(broker: &Broker, topic: &str) -> Deployment {
    let redis = Redis::start();
    let dlq = random_name("dlq");
    let (changes, review) = (random_name("changes"), random_name("review"));
    for t in [&dlq, &changes, &review] {
        broker.create_topic(t, 1).await;
    }
    let admin = broker.admin_topic().await;
    let sealed = broker.sealed_topic().await;
    let boards = format!(
        r#"
[sealing]
topic = "{sealed}"
top = 5
idle_grace = "1s"
check_interval = "100ms"
lease = "2s"

[[board]]
id = "pts"
on = ["match"]
mode = "sum"
periods = ["all_time", "hourly"]
close_after = "1m"
notify_top = 5

[[board]]
id = "guard"
on = ["match"]
mode = "best"
periods = ["all_time"]
[board.integrity]
score_over = {{ limit = 500, action = "hold" }}
hold_hides_after = {{ count = 3, window = "24h" }}
"#
    );
    let mut cfg = WorkerConfig::new(broker, &redis, topic, &dlq, &boards);
    cfg.admin_topics = vec![admin.clone()];
    cfg.kafka_extra = format!("changes_topic = \"{changes}\"\nreview_topic = \"{review}\"");
    cfg.worker_section = "batch_size = 50\nshutdown_timeout = \"20s\"\nmax_backoff = \"1s\"\n".into();
    Deployment { redis, cfg, dlq, changes, review, admin, sealed }
}

/// 6,000 records over the three hours before this one: 30 players, small
/// scores, 3% over the hold limit, 2% produced again (a producer's retry),
/// 1% not JSON and 1% without a player. Returns them and the offsets of
/// the bad ones.
fn stream() -> (Vec<Record>, BTreeSet<i64>) {
    let mut rng = Lcg(70);
    let now = chrono::Utc::now().timestamp_millis();
    let start = now - now.rem_euclid(HOUR) - 3 * HOUR;
    let (mut records, mut bad) = (Vec::new(), BTreeSet::new());
    let mut earlier: Vec<Record> = Vec::new();
    for i in 0..6_000i64 {
        let ts = start + i * (3 * HOUR / 6_000);
        let player = format!("p{:02}", rng.next(30));
        let record = match rng.next(100) {
            0 => (player, b"{ not json".to_vec(), Some(ts)),
            1 => (
                player,
                json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "match", "score": 5, "ts": ts})
                    .to_string()
                    .into_bytes(),
                Some(ts),
            ),
            2 | 3 if !earlier.is_empty() => earlier[rng.next(earlier.len() as u64) as usize].clone(),
            4..=6 => event_record("match", &player, 501 + rng.next(500) as i64, ts, ts, None),
            _ => event_record("match", &player, 1 + rng.next(100) as i64, ts, ts, None),
        };
        if serde_json::from_slice::<serde_json::Value>(&record.1).map_or(true, |v| v.get("player_id").is_none()) {
            bad.insert(records.len() as i64);
        } else {
            earlier.push(record.clone());
        }
        records.push(record);
    }
    (records, bad)
}

/// The records of `topic` a `read_committed` consumer reads, by output id
/// (key, value); fails if an id is there twice.
fn committed_once(broker: &Broker, topic: &str) -> Outputs {
    let mut out = BTreeMap::new();
    for m in broker.read_all(topic, 1) {
        let id = header(&m, "rankflow-output-id").unwrap_or_else(|| panic!("a record of {topic} without an output id"));
        let record = (m.key().unwrap_or_default().to_vec(), m.payload().unwrap_or_default().to_vec());
        assert!(out.insert(id.clone(), record).is_none(), "{topic}: output {id} committed twice");
    }
    out
}

/// What a `read_uncommitted` consumer reads of `topic`: copies of the
/// committed records only, each the same record under the same id.
fn uncommitted_are_copies(broker: &Broker, topic: &str, committed: &Outputs) -> usize {
    let all: Vec<OwnedMessage> = broker.read_all_as(topic, 1, "read_uncommitted");
    for m in &all {
        let id = header(m, "rankflow-output-id").expect("an output id");
        let record = (m.key().unwrap_or_default().to_vec(), m.payload().unwrap_or_default().to_vec());
        assert_eq!(
            committed.get(&id),
            Some(&record),
            "{topic}: an uncommitted copy of {id} is no copy of what was committed"
        );
    }
    all.len()
}

/// Every output topic of a deployment, read committed.
fn outputs(broker: &Broker, d: &Deployment) -> Vec<(&'static str, Outputs)> {
    [("dead letters", &d.dlq), ("rank changes", &d.changes), ("review records", &d.review), ("hides", &d.admin)]
        .into_iter()
        .map(|(what, topic)| (what, committed_once(broker, topic)))
        .collect()
}

/// Waits until `d` has applied the whole stream and its hides, and has
/// published a sealed top for each of the stream's three hours.
async fn finished(broker: &Broker, d: &Deployment, topic: &str, partitions: i32, worker: &Worker) -> Outputs {
    broker.wait_committed_to_end(&d.cfg.group, topic, partitions, Duration::from_secs(180));
    let mut conn = d.redis.conn().await;
    wait_applied(&mut conn, topic, 6_000, worker, "the stream was not applied").await;
    broker.wait_committed_to_end(&d.cfg.group, &d.admin, 1, Duration::from_secs(60));
    broker.read_at_least(&d.sealed, 1, 3, Duration::from_secs(120));
    committed_once(broker, &d.sealed)
}

#[tokio::test(flavor = "multi_thread")]
async fn every_output_is_committed_once_through_sigkills_and_equals_an_untouched_runs() {
    let broker = Broker::start();
    let topic = random_name("scores");
    broker.create_topic(&topic, 1).await;
    let (records, bad) = stream();
    broker.produce(&topic, &records).await;

    // The model: a deployment left alone.
    let model = deployment(&broker, &topic).await;
    let w = Worker::spawn(&model.cfg);
    let model_sealed = finished(&broker, &model, &topic, 1, &w).await;
    let model_outputs = outputs(&broker, &model);
    drop(w);

    // The same stream, killed -9 five times as it goes.
    let killed = deployment(&broker, &topic).await;
    let mut conn = killed.redis.conn().await;
    let mut rng = Lcg(9);
    for k in 1..=5 {
        let mut w = Worker::spawn(&killed.cfg);
        wait_applied(&mut conn, &topic, 6_000 * k / 6, &w, &format!("no progress before kill {k}")).await;
        tokio::time::sleep(Duration::from_millis(rng.next(300))).await;
        w.sigkill();
    }
    let w = Worker::spawn(&killed.cfg);
    let sealed = finished(&broker, &killed, &topic, 1, &w).await;
    let got = outputs(&broker, &killed);
    let aborted = w.metric("rankflow_transactions_total", &[("outcome", "aborted")]).await;

    // Each output once, as the untouched run has it.
    for ((what, got), (_, want)) in got.iter().zip(&model_outputs) {
        assert!(!want.is_empty(), "the model produced no {what}");
        let missing: Vec<&String> = want.keys().filter(|id| !got.contains_key(*id)).take(3).collect();
        let extra: Vec<&String> = got.keys().filter(|id| !want.contains_key(*id)).take(3).collect();
        assert!(missing.is_empty() && extra.is_empty(), "{what}: missing {missing:?}, extra {extra:?}\n{}", w.log());
        assert!(got == want, "{what}: the records differ from the model's");
    }
    assert_eq!(sealed, model_sealed, "sealed tops");
    // The dead letters are the stream's bad records, by their source offsets.
    let offsets: BTreeSet<i64> = broker
        .read_all(&killed.dlq, 1)
        .iter()
        .map(|m| header(m, "rankflow.source.offset").unwrap().parse().unwrap())
        .collect();
    assert_eq!(offsets, bad, "dead letters by source offset");
    // Uncommitted copies, if any, are copies.
    let mut copies = 0;
    for (topic, (_, committed)) in [&killed.dlq, &killed.changes, &killed.review, &killed.admin].into_iter().zip(&got) {
        copies += uncommitted_are_copies(&broker, topic, committed);
    }
    copies += uncommitted_are_copies(&broker, &killed.sealed, &sealed);
    eprintln!("{copies} records read uncommitted; the restarted worker aborted {aborted} transactions");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_stopped_until_its_partitions_move_is_fenced_when_it_wakes_and_no_output_is_committed_twice() {
    const PARTITIONS: i32 = 4;
    let broker = Broker::start();
    let topic = random_name("scores");
    broker.create_topic(&topic, PARTITIONS).await;
    let (records, _) = stream();
    // Records keep coming while the workers come and go.
    let producing = broker.produce_paced(&topic, records, 200, Duration::from_millis(300));

    // Two workers share the partitions; the first is stopped (SIGSTOP)
    // mid-stream until its session has lapsed and the second holds them
    // all, then woken: whatever it had in hand must not be committed.
    let d = deployment(&broker, &topic).await;
    let mut conn = d.redis.conn().await;
    let w1 = Worker::spawn(&d.cfg);
    wait_applied(&mut conn, &topic, 1_000, &w1, "the first worker made no progress").await;
    let w2 = Worker::spawn_with_port(&d.cfg, free_port());
    wait_http(w2.http_port, Duration::from_secs(30)).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while w2.metric("rankflow_assigned_partitions", &[]).await < 1.0 {
        assert!(std::time::Instant::now() < deadline, "the second worker got no partition:\n{}", w2.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let at = applied(&mut conn, &topic).await;
    wait_applied(&mut conn, &topic, at + 300, &w1, "no progress with two workers").await;
    w1.signal("STOP");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while w2.metric("rankflow_assigned_partitions", &[]).await < PARTITIONS as f64 {
        assert!(std::time::Instant::now() < deadline, "the partitions never moved:\n{}", w2.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let at = applied(&mut conn, &topic).await;
    assert!(at < 6_000, "the stop must land mid-stream (applied {at})");
    w1.signal("CONT");
    producing.await.expect("the producer ran to its end");
    let sealed = finished(&broker, &d, &topic, PARTITIONS, &w2).await;
    let fenced = w1.metric("rankflow_transactions_total", &[("outcome", "aborted")]).await;
    assert!(fenced >= 1.0, "the woken worker's transaction was not aborted:\n{}", w1.log());
    let got = outputs(&broker, &d);

    // The model: the whole stream, through one worker left alone.
    let model = deployment(&broker, &topic).await;
    let w = Worker::spawn(&model.cfg);
    let model_sealed = finished(&broker, &model, &topic, PARTITIONS, &w).await;
    let model_outputs = outputs(&broker, &model);

    for ((what, got), (_, want)) in got.iter().zip(&model_outputs) {
        // Rank changes depend on how the partitions interleave: each once is what can be asked.
        if *what == "rank changes" {
            assert!(!got.is_empty(), "no rank changes");
            continue;
        }
        assert!(got == want, "{what}: {} records, the model's {}\n{}\n{}", got.len(), want.len(), w1.log(), w2.log());
    }
    // A partition caught up between paced slices lets its past hours seal
    // before the rest of them arrives (their later events count in
    // all_time only): the tops may differ from the model's; each is there once.
    let hours = |m: &Outputs| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(hours(&sealed), hours(&model_sealed), "sealed tops");
    for (topic, (_, committed)) in [&d.dlq, &d.changes, &d.review, &d.admin].into_iter().zip(&got) {
        uncommitted_are_copies(&broker, topic, committed);
    }
    uncommitted_are_copies(&broker, &d.sealed, &sealed);
}
