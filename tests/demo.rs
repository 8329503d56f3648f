//! `rankflow demo` with nothing but Redis: the embedded broker (librdkafka's
//! mock cluster in the process) takes the sample events, the real worker
//! consumes them (dead-lettering the bad ones, counting producer duplicates
//! once), and the API and the page answer. `rankflow run` refuses the
//! embedded broker. The samples written as Avro or Protobuf come to the same
//! boards as in JSON, a board ranked by several columns (with its players'
//! display names) among them. Producing shows a progress bar on a terminal (a tmux
//! session, read with capture-pane) and nothing in a log file.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// config/demo.toml on this Redis and HTTP port, written into `dir`.
fn demo_config(dir: &std::path::Path, redis: &Redis, port: u16) -> std::path::PathBuf {
    let config = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/demo.toml"))
        .unwrap()
        .replace("redis://127.0.0.1:16379", &redis.url())
        .replace("127.0.0.1:9898", &format!("127.0.0.1:{port}"));
    assert!(config.contains("brokers = \"embedded\""));
    let path = dir.join("demo.toml");
    std::fs::write(&path, &config).unwrap();
    path
}

/// A running demo on its own Redis and port, its samples written in `format`.
struct Demo {
    child: std::process::Child,
    port: u16,
    path: std::path::PathBuf,
    dir: tempfile::TempDir,
    _redis: Redis,
}

impl Demo {
    fn start(format: &str) -> Demo {
        let redis = Redis::start();
        let port = free_port();
        let dir = temp_dir();
        let path = demo_config(dir.path(), &redis, port);
        let log = std::fs::File::create(dir.path().join("demo.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_rankflow"))
            .args(["demo", "--config", path.to_str().unwrap(), "--events", "3000", "--seed", "5", "--format", format])
            .env("RUST_LOG", "info,librdkafka=warn")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        Demo { child, port, path, dir, _redis: redis }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("demo.log")).unwrap_or_default()
    }

    /// The metrics once every sample is consumed and committed.
    async fn drained(&self) -> Vec<(String, std::collections::HashMap<String, String>, f64)> {
        wait_http(self.port, Duration::from_secs(30)).await;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (_, text) = http_get(self.port, "/metrics").await;
            let m = samples(&text);
            // Done once every partition reports its lag, all zero: a partition
            // holding a dead letter not yet acknowledged has committed nothing
            // and has no lag series yet.
            let lags: Vec<f64> = m
                .iter()
                .filter(|(n, l, _)| {
                    n == "rankflow_consumer_lag" && l.get("topic").map(String::as_str) == Some("demo.scores")
                })
                .map(|(_, _, v)| *v)
                .collect();
            let lag: f64 = lags.iter().sum();
            let consumed = sum(&m, "rankflow_records_consumed_total", &[]);
            if consumed >= 3000.0 && lags.len() == 4 && lag == 0.0 {
                return m;
            }
            assert!(
                Instant::now() < deadline,
                "the demo did not consume its events: consumed {consumed}, lag {lags:?}\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_runs_the_whole_flow_on_its_embedded_broker() {
    let mut demo = Demo::start("json");
    let (port, path) = (demo.port, demo.path.clone());
    let samples = demo.drained().await;
    // Every record was consumed once; bad records dead-lettered, duplicates counted once.
    assert_eq!(sum(&samples, "rankflow_records_consumed_total", &[]), 3000.0);
    assert!(sum(&samples, "rankflow_dead_letters_total", &[]) > 0.0);
    assert!(sum(&samples, "rankflow_events_duplicate_total", &[("kind", "event_id")]) > 0.0);
    let (status, body) = http_get(port, "/v1/boards/best_match/top?limit=3").await;
    assert_eq!(status, 200, "{body}");
    let top: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(top["total"].as_i64().unwrap() > 100, "{top}");
    assert!(top["entries"][0]["meta"]["name"].is_string(), "{top}");
    // A board ranked by several columns shows display names too.
    let (status, body) = http_get(port, "/v1/boards/arena/top?limit=3").await;
    assert_eq!(status, 200, "{body}");
    let arena: serde_json::Value = serde_json::from_str(&body).unwrap();
    let first = &arena["entries"][0];
    assert!(first["scores"]["wins"].as_i64() > Some(0) && first["meta"]["name"].is_string(), "{arena}");
    let (status, page) = http_get(port, "/").await;
    assert!(status == 200 && page.contains("rankflow leaderboards"));
    kill(&mut demo.child);
    let log = demo.log();
    assert!(!log.contains("producing sample events"), "no progress bar in a log file:\n{log}");
    let mut out = String::new();
    std::io::Read::read_to_string(demo.child.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert!(out.contains(&format!("http://127.0.0.1:{port}/")), "the demo says where to look:\n{out}");

    // `rankflow run` does not take the demo's broker.
    let run = Command::new(env!("CARGO_BIN_EXE_rankflow"))
        .args(["run", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("rankflow demo"));
}

/// `--format avro` and `--format protobuf`: the same samples in the Schema
/// Registry wire format, read back by the worker with rankflow's own
/// schemas, come to the same boards as JSON.
#[tokio::test(flavor = "multi_thread")]
async fn the_demo_in_avro_or_protobuf_comes_to_the_same_boards_as_in_json() {
    let mut answers = Vec::new();
    for format in ["json", "avro", "protobuf"] {
        let mut demo = Demo::start(format);
        let m = demo.drained().await;
        let counts = (
            sum(&m, "rankflow_events_applied_total", &[]),
            sum(&m, "rankflow_events_duplicate_total", &[]),
            sum(&m, "rankflow_dead_letters_total", &[]),
        );
        let (_, points) = http_get(demo.port, "/v1/boards/points/top?limit=20").await;
        let (_, laps) = http_get(demo.port, "/v1/boards/laps/top?period=daily&split=monza&limit=20").await;
        let (_, arena) = http_get(demo.port, "/v1/boards/arena/top?limit=20").await;
        let top = |body: &str| serde_json::from_str::<serde_json::Value>(body).unwrap()["entries"].clone();
        kill(&mut demo.child);
        assert!(counts.0 > 2000.0, "{format}: {counts:?}\n{}", demo.log());
        answers.push((format, counts, top(&points), top(&laps), top(&arena)));
    }
    assert!(answers[0].4.as_array().is_some_and(|a| a.len() == 20), "{}", answers[0].4);
    for (format, counts, points, laps, arena) in &answers[1..] {
        let json = &answers[0];
        assert_eq!((counts, points, laps, arena), (&json.1, &json.2, &json.3, &json.4), "{format} against json");
    }
}

#[test]
fn the_demo_draws_its_progress_on_a_terminal() {
    let redis = Redis::start();
    let dir = temp_dir();
    let path = demo_config(dir.path(), &redis, free_port());
    let session = random_name("rankflow-test-progress");
    let command = format!(
        "RUST_LOG=warn {} demo --config {} --events 400000; sleep 30",
        env!("CARGO_BIN_EXE_rankflow"),
        path.display()
    );
    let tmux =
        |args: &[&str]| Command::new("tmux").args(args).output().expect("tmux (scripts/setup.sh --test installs it)");
    assert!(tmux(&["new-session", "-d", "-s", &session, "-x", "160", "-y", "12", &command]).status.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = String::new();
    while Instant::now() < deadline {
        let pane = String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", &session]).stdout).to_string();
        if pane.contains("producing sample events [") && pane.contains("/400000") {
            seen = pane;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    tmux(&["kill-session", "-t", &session]);
    assert!(!seen.is_empty(), "no progress bar on the terminal within 60s");
    assert!(seen.contains("eta"), "{seen}");
}
