//! Operations: the metrics a running worker exports against the model of
//! the stream it read, the names the dashboard and alert rules use, and
//! offline validation of the compose stack and the rules.

use std::collections::{BTreeSet, HashMap};
use std::process::Command;
use std::time::Duration;

use support::stream::{self, BOARDS};
use support::*;

/// Every `rankflow_*` metric family a PromQL-bearing file mentions.
fn names_used(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(pos) = text[i..].find("rankflow_") {
        let start = i + pos;
        let mut end = start;
        while end < bytes.len()
            && (bytes[end].is_ascii_lowercase() || bytes[end] == b'_' || bytes[end].is_ascii_digit())
        {
            end += 1;
        }
        let name = &text[start..end];
        let family = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name);
        out.insert(family.to_string());
        i = end;
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_what_the_model_expects_and_cover_every_dashboard_and_alert_name() {
    let Stack { redis, broker, topic, dlq } = Stack::start(2).await;
    let s = stream::generate(5_000, 11);
    broker.produce(&topic, &s.records).await;
    // A league board and a board with an integrity rule too (of event types the stream does not hold):
    // their families are there from the start.
    let boards = format!(
        "{BOARDS}\n[[board]]\nid = \"league\"\non = [\"league_match\"]\nmode = \"sum\"\nperiods = [\"all_time\"]\n\
         schedules = [{{ name = \"week\", cron = \"0 0 * * MON\", duration = \"7d\" }}]\nclose_after = \"1h\"\n\
         [board.league]\nrounds = \"week\"\ntiers = [\"bronze\", \"silver\"]\ncohort_size = 30\npromote = 5\ndemote = 5\n\
         [[board]]\nid = \"checked\"\non = [\"checked_match\"]\nmode = \"sum\"\nperiods = [\"all_time\"]\n\
         [board.integrity]\nscore_over = {{ limit = 1000, action = \"reject\" }}\n"
    );
    let cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, &boards);
    let w = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, 2, Duration::from_secs(120));
    wait_http(w.http_port, Duration::from_secs(10)).await;

    let (status, text) = w.http_get("/metrics").await;
    assert_eq!(status, 200);
    let mut m = samples(&text);

    assert_eq!(sum(&m, "rankflow_records_consumed_total", &[("topic", &topic)]), s.records.len() as f64);
    s.assert_board_counts(&m);
    assert_eq!(sum(&m, "rankflow_events_skipped_total", &[]), s.skipped_records as f64);
    let mut by_reason: HashMap<&str, f64> = HashMap::new();
    for (_, reason) in &s.dead {
        *by_reason.entry(reason.as_str()).or_default() += 1.0;
    }
    for (reason, count) in &by_reason {
        assert_eq!(sum(&m, "rankflow_dead_letters_total", &[("reason", reason)]), *count, "dead letters for {reason}");
    }
    assert_eq!(sum(&m, "rankflow_dead_letters_total", &[]), s.dead.len() as f64);
    // Record-level rejections are counted with board="none", board refusals by board.
    assert_eq!(
        sum(&m, "rankflow_events_rejected_total", &[("board", "none"), ("reason", "invalid_json")]),
        by_reason["invalid_json"]
    );
    assert_eq!(
        sum(&m, "rankflow_events_rejected_total", &[("board", "laps"), ("reason", "expired_period")]),
        by_reason["expired_period"]
    );
    assert!(sum(&m, "rankflow_batch_size_count", &[]) >= 1.0);
    assert!(sum(&m, "rankflow_redis_roundtrip_seconds_count", &[]) >= 1.0);
    assert!(sum(&m, "rankflow_event_latency_seconds_count", &[("source", "record")]) >= s.applied_records as f64);
    assert_eq!(sum(&m, "rankflow_redis_up", &[]), 1.0);
    assert!(sum(&m, "rankflow_rebalances_total", &[("kind", "assign")]) >= 2.0);
    // Offsets are committed by transactions (kafka.transactions, the default), not the consumer.
    assert!(sum(&m, "rankflow_transactions_total", &[("outcome", "committed")]) >= 1.0);
    assert_eq!(sum(&m, "rankflow_transactions_total", &[("outcome", "aborted")]), 0.0);
    assert!(sum(&m, "rankflow_transaction_commit_seconds_count", &[]) >= 1.0);
    assert_eq!(sum(&m, "rankflow_build_info", &[]), 1.0);
    // Lag and broker state come from librdkafka statistics every 5 s.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        m = samples(&w.http_get("/metrics").await.1);
        let lag_series = m.iter().filter(|(n, _, _)| n == "rankflow_consumer_lag").count();
        if lag_series == 2 && sum(&m, "rankflow_consumer_lag", &[]) == 0.0 && sum(&m, "rankflow_kafka_up", &[]) == 1.0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "consumer lag per partition never reached 0 with kafka up");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (status, ready) = w.http_get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(w.http_get("/healthz").await.0, 200);

    // No player or event id is ever a label value.
    for (_, labels, _) in &m {
        for v in labels.values() {
            assert!(!v.starts_with('p') || !v[1..].chars().all(|c| c.is_ascii_digit()), "player id as a label: {v}");
            assert!(uuid::Uuid::parse_str(v).is_err(), "event id as a label: {v}");
        }
    }

    // Every family the dashboard and the alert rules use is exported.
    let exported: BTreeSet<String> = m
        .iter()
        .map(|(n, _, _)| ["_bucket", "_sum", "_count"].iter().find_map(|s| n.strip_suffix(s)).unwrap_or(n).to_string())
        .collect();
    let root = env!("CARGO_MANIFEST_DIR");
    for file in ["dashboards/rankflow.json", "dashboards/alerts.yml"] {
        let used = names_used(&std::fs::read_to_string(format!("{root}/{file}")).unwrap());
        assert!(used.len() >= 8, "{file} uses only {used:?}");
        let missing: Vec<&String> = used.iter().filter(|n| !exported.contains(*n)).collect();
        assert!(missing.is_empty(), "{file} uses metrics rankflow does not export: {missing:?}");
    }
}

#[test]
fn the_compose_stack_the_alert_rules_and_the_shipped_configs_validate_offline() {
    let root = env!("CARGO_MANIFEST_DIR");
    let compose = Command::new("docker-compose")
        .args(["-f", &format!("{root}/docker-compose.yml"), "config", "-q"])
        .output()
        .expect("docker-compose (Debian's package, installed by scripts/setup.sh)");
    assert!(compose.status.success(), "docker-compose config: {}", String::from_utf8_lossy(&compose.stderr));
    let rules = Command::new("promtool")
        .args(["check", "rules", &format!("{root}/dashboards/alerts.yml")])
        .output()
        .expect("promtool (Debian's prometheus package, installed by scripts/setup.sh)");
    assert!(
        rules.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&rules.stdout),
        String::from_utf8_lossy(&rules.stderr)
    );
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{root}/dashboards/rankflow.json")).unwrap()).unwrap();
    assert!(dashboard["panels"].as_array().unwrap().len() >= 10);
    for cfg in ["config/rankflow.toml", "config/demo.toml", "deploy/compose.toml"] {
        let out = Command::new(env!("CARGO_BIN_EXE_rankflow"))
            .args(["check-config", &format!("{root}/{cfg}")])
            .output()
            .unwrap();
        assert!(out.status.success(), "{cfg}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn check_config_names_every_bad_field_and_exits_non_zero() {
    let dir = temp_dir();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[kafka]\nbrokers = \"\"\ntopics = [\"s\"]\ndead_letter_topic = \"s\"\n[[board]]\nid = \"Bad Id\"\non = []\nmode = \"median\"\nperiods = [\"daily\"]\ntimezone = \"Mars/Base\"\n",
    )
    .unwrap();
    let out =
        Command::new(env!("CARGO_BIN_EXE_rankflow")).args(["check-config", path.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for field in
        ["kafka.brokers", "kafka.dead_letter_topic", "board[0].id", "board[0].on", "board[0].mode", "board[0].timezone"]
    {
        assert!(err.contains(field), "{field} not named in:\n{err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn secrets_never_reach_the_log_even_at_debug_level() {
    let redis = Redis::start_with(&["--requirepass", "s3cret-redis-pw"]);
    let broker = Broker::start();
    let topic = random_name("scores");
    let dlq = random_name("dlq");
    broker.create_topic(&topic, 1).await;
    broker.create_topic(&dlq, 1).await;
    let s = stream::generate(200, 3);
    broker.produce(&topic, &s.records).await;
    let mut cfg = WorkerConfig::new(&broker, &redis, &topic, &dlq, BOARDS);
    cfg.redis_url = format!("redis://:s3cret-redis-pw@127.0.0.1:{}", redis.port);
    cfg.extra_kafka_options.push(("sasl.password".into(), "s3cret-kafka-pw".into()));
    cfg.rust_log = "debug".into();
    let mut w = Worker::spawn(&cfg);
    broker.wait_committed_to_end(&cfg.group, &topic, 1, Duration::from_secs(60));
    let status = w.sigterm(Duration::from_secs(25)).expect("exits on SIGTERM");
    assert!(status.success());
    let log = w.log();
    assert!(log.contains("Connecting to Redis") && log.contains("***"), "the redacted URL is logged:\n{log}");
    assert!(!log.contains("s3cret-redis-pw"), "the Redis password reached the log");
    assert!(!log.contains("s3cret-kafka-pw"), "the SASL password reached the log");
}
