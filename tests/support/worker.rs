//! The rankflow binary as a child process: its configuration, its life
//! (spawn, SIGTERM, SIGKILL) and what a test reads of it (log, HTTP,
//! metrics).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::http::{http_get, http_post};
use super::{end, free_port, kill, random_name, temp_dir, Broker, Redis, RedisCluster};

/// The settings a test worker runs with.
#[derive(Clone)]
pub struct WorkerConfig {
    pub brokers: String,
    pub redis_url: String,
    pub topic: String,
    /// More source topics, after `topic` (none unless set).
    pub extra_topics: Vec<String>,
    pub dead_letter_topic: String,
    /// `kafka.admin_topics` (none unless set).
    pub admin_topics: Vec<String>,
    pub group: String,
    pub http_port: u16,
    /// TOML appended after the generated sections: the `[[board]]`s and any overrides.
    pub boards: String,
    pub extra_kafka_options: Vec<(String, String)>,
    pub worker_section: String,
    /// RUST_LOG of the worker process.
    pub rust_log: String,
    /// Extra lines of the `[redis]` section (e.g. `cluster = true`, `dedupe_ttl = "1s"`).
    pub redis_extra: String,
    /// Extra lines of the `[http]` section (e.g. `request_timeout = "500ms"`).
    pub http_extra: String,
    /// Extra lines of the `[kafka]` section (e.g. `changes_topic = "changes"`).
    pub kafka_extra: String,
}

impl WorkerConfig {
    pub fn new(broker: &Broker, redis: &Redis, topic: &str, dlq: &str, boards: &str) -> WorkerConfig {
        WorkerConfig::with_redis_url(broker, redis.url(), topic, dlq, boards)
    }

    /// A worker of `cluster` (`redis.cluster = true`, a seed node's URL).
    pub fn on_cluster(broker: &Broker, cluster: &RedisCluster, topic: &str, dlq: &str, boards: &str) -> WorkerConfig {
        let mut cfg = WorkerConfig::with_redis_url(broker, cluster.url(), topic, dlq, boards);
        cfg.redis_extra = "cluster = true".into();
        cfg
    }

    fn with_redis_url(broker: &Broker, redis_url: String, topic: &str, dlq: &str, boards: &str) -> WorkerConfig {
        WorkerConfig {
            brokers: broker.brokers(),
            redis_url,
            topic: topic.into(),
            extra_topics: Vec::new(),
            dead_letter_topic: dlq.into(),
            admin_topics: Vec::new(),
            group: random_name("group"),
            http_port: free_port(),
            boards: boards.into(),
            extra_kafka_options: Vec::new(),
            worker_section: "batch_size = 500\nshutdown_timeout = \"20s\"\nmax_backoff = \"1s\"\n".into(),
            rust_log: "info,librdkafka=warn,rdkafka=warn".into(),
            redis_extra: String::new(),
            http_extra: String::new(),
            kafka_extra: String::new(),
        }
    }

    pub fn render(&self) -> String {
        // A worker killed with SIGKILL holds its partitions until its
        // session expires; the tests restart killed workers in the same
        // group, so they ask for a short session (3 s, heartbeats every
        // 0.5 s), as an operator wanting quick takeovers would.
        let mut opts = String::from("\"session.timeout.ms\" = 3000\n\"heartbeat.interval.ms\" = 500\n");
        for (k, v) in &self.extra_kafka_options {
            opts.push_str(&format!("\"{k}\" = \"{v}\"\n"));
        }
        let admin: Vec<String> = self.admin_topics.iter().map(|t| format!("\"{t}\"")).collect();
        let topics: Vec<String> =
            std::iter::once(&self.topic).chain(&self.extra_topics).map(|t| format!("\"{t}\"")).collect();
        format!(
            "[kafka]\nbrokers = \"{}\"\ntopics = [{}]\nadmin_topics = [{}]\ngroup_id = \"{}\"\ndead_letter_topic = \"{}\"\n{}\n[kafka.options]\n{opts}\n\
             [redis]\nurl = \"{}\"\n{}\n\n[http]\nlisten = \"127.0.0.1:{}\"\n{}\n\n[worker]\n{}\n{}",
            self.brokers,
            topics.join(", "),
            admin.join(", "),
            self.group,
            self.dead_letter_topic,
            self.kafka_extra,
            self.redis_url,
            self.redis_extra,
            self.http_port,
            self.http_extra,
            self.worker_section,
            self.boards
        )
    }
}

/// `command` without the `RANKFLOW_` variables of the test run's own
/// environment: rankflow reads each as a config override, so one meant for
/// the test runner would change (or refuse) every worker's config.
pub fn hermetic(mut command: Command) -> Command {
    for (name, _) in std::env::vars().filter(|(n, _)| n.starts_with("RANKFLOW_")) {
        command.env_remove(name);
    }
    command
}

/// `rankflow <args> --config <config>` run to its end, off the async
/// runtime (an operator's command: `rebuild`, `accept-loss`).
pub async fn run_rankflow(args: &[&str], config: &std::path::Path) -> std::process::Output {
    let (args, config): (Vec<String>, PathBuf) = (args.iter().map(|a| a.to_string()).collect(), config.into());
    tokio::task::spawn_blocking(move || {
        hermetic(Command::new(crate::rankflow_bin()))
            .args(&args)
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", "info,librdkafka=warn,rdkafka=warn")
            .output()
            .expect("run rankflow")
    })
    .await
    .expect("the command's thread")
}

/// A running `rankflow run` process.
pub struct Worker {
    child: Option<Child>,
    pub config_path: PathBuf,
    pub http_port: u16,
    log_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Worker {
    /// Several workers of one group: each gets its own HTTP port.
    pub fn spawn_with_port(cfg: &WorkerConfig, http_port: u16) -> Worker {
        let mut c = cfg.clone();
        c.http_port = http_port;
        Worker::spawn(&c)
    }

    pub fn spawn(cfg: &WorkerConfig) -> Worker {
        let dir = temp_dir();
        let config_path = dir.path().join("rankflow.toml");
        std::fs::write(&config_path, cfg.render()).expect("write config");
        let log_path = dir.path().join("worker.log");
        let log = std::fs::File::create(&log_path).expect("worker log");
        let child = hermetic(Command::new(crate::rankflow_bin()))
            .arg("run")
            .arg("--config")
            .arg(&config_path)
            .env("RUST_LOG", &cfg.rust_log)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn rankflow");
        Worker { child: Some(child), config_path, http_port: cfg.http_port, log_path, _dir: dir }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Resident memory now, in KiB (from /proc).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// `rankflow close --wait` on this worker's config: closes `period` of
    /// `board` and waits (60 s at most) until it is sealed; asserts it did.
    pub fn close_and_wait(&self, board: &str, period: &str) {
        let out = Command::new(crate::rankflow_bin())
            .args(["close", "--config"])
            .arg(&self.config_path)
            .args(["--board", board, "--period", period, "--wait", "--timeout", "60s"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Sends `signal` (`STOP`, `CONT`, ...) to the process.
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill").arg(format!("-{signal}")).arg(self.pid().to_string()).status();
        assert!(ok.is_ok_and(|s| s.success()), "kill -{signal} {}", self.pid());
    }

    pub fn sigkill(&mut self) {
        end(&mut self.child);
    }

    /// Waits for the process to exit by itself, at most `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Sends SIGTERM and waits for the exit status, at most `timeout`.
    pub fn sigterm(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let mut c = self.child.take()?;
        let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = c.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                kill(&mut c);
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub async fn http_get(&self, path: &str) -> (u16, String) {
        http_get(self.http_port, path).await
    }

    /// A GET whose body is read as JSON (a body that is not JSON comes back as `{"raw": body}`).
    pub async fn get_json(&self, path: &str) -> (u16, serde_json::Value) {
        let (status, body) = self.http_get(path).await;
        (status, as_json(body))
    }

    /// A POST of a JSON body, its answer read as [`Worker::get_json`] reads one.
    pub async fn post_json(&self, path: &str, body: &str) -> (u16, serde_json::Value) {
        let (status, body) = http_post(self.http_port, path, body).await;
        (status, as_json(body))
    }

    /// A metric's value now, summed over the series whose labels include `filter`.
    pub async fn metric(&self, name: &str, filter: &[(&str, &str)]) -> f64 {
        sum(&samples(&self.http_get("/metrics").await.1), name, filter)
    }
}

/// `name{labels} value` lines of a Prometheus text exposition.
pub fn samples(text: &str) -> Vec<(String, HashMap<String, String>, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
                .collect();
            Some((name.to_string(), labels, value.parse().ok()?))
        })
        .collect()
}

/// The sum of a metric's samples whose labels include `filter`.
pub fn sum(samples: &[(String, HashMap<String, String>, f64)], name: &str, filter: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|(n, l, _)| n == name && filter.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v)))
        .map(|(_, _, v)| v)
        .sum()
}

impl Drop for Worker {
    fn drop(&mut self) {
        end(&mut self.child);
    }
}

fn as_json(body: String) -> serde_json::Value {
    serde_json::from_str(&body).unwrap_or_else(|_| serde_json::json!({ "raw": body }))
}
