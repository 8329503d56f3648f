//! The one test harness every integration test uses: a real `redis-server`
//! and a real Kafka-compatible broker (tansu) on free loopback ports in a
//! temporary directory, random topic and group names, the rankflow binary as
//! a child process, and helpers that read committed offsets and topics.
//! Everything started here is stopped on `Drop`. Every process's command line
//! carries `rankflow-test-`, so `scripts/test.sh` can end any that a killed
//! test run left behind.
#![allow(dead_code)]

pub mod periods;
pub mod stream;

use std::collections::{BTreeMap, HashMap};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::OwnedMessage;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

/// A port nobody listens on right now, no higher than 55535: a Redis
/// Cluster node also listens on its port + 10000 and refuses to start above
/// that (as `free_port` in scripts/lib.sh).
pub fn free_port() -> u16 {
    loop {
        let port =
            TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port");
        if port <= 55535 {
            return port;
        }
    }
}

pub fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("rankflow-test-").tempdir().expect("temp dir")
}

pub fn random_name(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

fn wait_for_port(port: u16, what: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on port {port} within {timeout:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// A `redis-server` of our own.
pub struct Redis {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
}

impl Redis {
    pub fn start() -> Redis {
        Redis::start_with(&[])
    }

    /// Extra `redis-server` arguments, e.g. `["--appendonly", "yes"]`.
    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws a server [`Redis::pause`] froze.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill").args([sig, &c.id().to_string()]).status();
        }
    }

    /// A Redis on `port`, for a test that points a worker at the port first.
    pub fn start_on(port: u16) -> Redis {
        let mut r = Redis { child: None, port, dir: temp_dir(), extra: Vec::new() };
        r.spawn();
        r
    }

    pub fn start_with(extra: &[&str]) -> Redis {
        let mut r = Redis {
            child: None,
            port: free_port(),
            dir: temp_dir(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        r.spawn();
        r
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--protected-mode", "no"])
            .args(["--maxmemory-policy", "noeviction", "--dir"])
            .arg(self.dir.path())
            .args(&self.extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server is installed (scripts/setup.sh)");
        self.child = Some(child);
        wait_for_port(self.port, "redis-server", Duration::from_secs(10));
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        // Checks read every key of a loaded server: no response timeout.
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
        redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .expect("connect to test redis")
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(&mut c);
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Where the tansu binary is: `$TANSU`, `tansu` on PATH, or cargo's bin dir.
pub fn tansu_bin() -> PathBuf {
    if let Ok(p) = std::env::var("TANSU") {
        return p.into();
    }
    if let Ok(out) = Command::new("sh").args(["-c", "command -v tansu"]).output() {
        let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !p.is_empty() {
            return p.into();
        }
    }
    let home =
        std::env::var("CARGO_HOME").unwrap_or_else(|_| format!("{}/.cargo", std::env::var("HOME").unwrap_or_default()));
    Path::new(&home).join("bin/tansu")
}

/// Creates the header index tansu 0.6's sqlite schema lacks (see
/// `scripts/tansu-index.sh`): without it, every fetch scans every dead
/// letter's headers. A harness workaround for the broker, changing nothing
/// rankflow does or any assertion checks.
fn index_tansu_headers(db: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/tansu-index.sh");
    let out = Command::new(&script).arg(db).output().expect("scripts/tansu-index.sh runs");
    assert!(out.status.success(), "indexing tansu's headers failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// A tansu broker with sqlite storage in its own directory.
pub struct Broker {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Broker {
    pub fn start() -> Broker {
        let mut b = Broker { child: None, port: free_port(), dir: temp_dir() };
        b.spawn();
        b
    }

    fn spawn(&mut self) {
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let marker = self.dir.path().file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("broker.log"))
            .expect("broker log");
        let child = Command::new(tansu_bin())
            .arg("broker")
            .args(["--listener-url", &url, "--advertised-listener-url", &url])
            // tansu resolves the sqlite path against its working directory.
            .args(["--storage-engine", "sqlite://broker.db"])
            // The cluster id carries the temp dir's name, so the process can be found by it.
            .args(["--cluster-id", &marker])
            .current_dir(self.dir.path())
            .env("RUST_LOG", "warn")
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("tansu is installed (scripts/setup.sh)");
        self.child = Some(child);
        wait_for_port(self.port, "tansu", Duration::from_secs(30));
        index_tansu_headers(&self.dir.path().join("broker.db"));
    }

    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(&mut c);
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.brokers());
        c
    }

    pub async fn create_topic(&self, name: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> = self.client().create().expect("admin client");
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        let res = admin
            .create_topics(&[NewTopic::new(name, partitions, TopicReplication::Fixed(1))], &opts)
            .await
            .expect("create topic");
        for r in res {
            r.unwrap_or_else(|(t, e)| panic!("create topic {t}: {e}"));
        }
    }

    pub fn producer(&self) -> FutureProducer {
        self.client().set("linger.ms", "5").set("message.timeout.ms", "30000").create().expect("producer")
    }

    /// A source topic of `partitions` partitions and a dead-letter topic, created: (topic, dlq).
    pub async fn topics(&self, partitions: i32) -> (String, String) {
        let (topic, dlq) = (random_name("scores"), random_name("dlq"));
        self.create_topic(&topic, partitions).await;
        self.create_topic(&dlq, 1).await;
        (topic, dlq)
    }

    /// Produces every record (key, value, optional record timestamp) in order
    /// and waits for all acknowledgements.
    pub async fn produce(&self, topic: &str, records: &[(String, Vec<u8>, Option<i64>)]) {
        let producer = self.producer();
        for chunk in records.chunks(5000) {
            let mut pending = Vec::with_capacity(chunk.len());
            for (k, v, ts) in chunk {
                let mut r = FutureRecord::to(topic).key(k.as_str()).payload(v.as_slice());
                if let Some(ts) = ts {
                    r = r.timestamp(*ts);
                }
                pending.push(producer.send_result(r).map_err(|(e, _)| e).expect("enqueue"));
            }
            for p in pending {
                p.await.expect("delivery future").map_err(|(e, _)| e).expect("delivered");
            }
        }
    }

    /// Produces `records` in slices of `slice`, pausing `pause` after each,
    /// on a task of its own: a stream that goes on while the test acts.
    pub fn produce_paced(
        &self,
        topic: &str,
        records: Vec<(String, Vec<u8>, Option<i64>)>,
        slice: usize,
        pause: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let producer = self.producer();
        let topic = topic.to_string();
        tokio::spawn(async move {
            for slice in records.chunks(slice) {
                let mut pending = Vec::with_capacity(slice.len());
                for (k, v, ts) in slice {
                    let mut r = FutureRecord::to(&topic).key(k.as_str()).payload(v.as_slice());
                    if let Some(ts) = ts {
                        r = r.timestamp(*ts);
                    }
                    pending.push(producer.send_result(r).map_err(|(e, _)| e).expect("enqueue"));
                }
                for p in pending {
                    p.await.expect("delivery future").map_err(|(e, _)| e).expect("delivered");
                }
                tokio::time::sleep(pause).await;
            }
        })
    }

    /// Produces `records` to one partition, in order.
    pub async fn produce_to(&self, topic: &str, partition: i32, records: &[(String, Vec<u8>, Option<i64>)]) {
        let producer = self.producer();
        let mut pending = Vec::with_capacity(records.len());
        for (k, v, ts) in records {
            let mut r = FutureRecord::to(topic).partition(partition).key(k.as_str()).payload(v.as_slice());
            if let Some(ts) = ts {
                r = r.timestamp(*ts);
            }
            pending.push(producer.send_result(r).map_err(|(e, _)| e).expect("enqueue"));
        }
        for p in pending {
            p.await.expect("delivery future").map_err(|(e, _)| e).expect("delivered");
        }
    }

    pub fn consumer(&self, group: &str) -> BaseConsumer {
        self.client()
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("session.timeout.ms", "30000")
            .create()
            .expect("consumer")
    }

    /// High watermark (log end) of every partition.
    pub fn log_end(&self, topic: &str, partitions: i32) -> Vec<i64> {
        let c = self.consumer(&random_name("watermarks"));
        (0..partitions).map(|p| c.fetch_watermarks(topic, p, Duration::from_secs(10)).expect("watermarks").1).collect()
    }

    /// A group's committed offset per partition (-1 where none).
    pub fn committed(&self, group: &str, topic: &str, partitions: i32) -> Vec<i64> {
        let c = self.consumer(group);
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(topic, p);
        }
        // A broker slowed by a loaded machine can time one lookup out: asked again, not failed.
        let mut tries = 0;
        let got = loop {
            match c.committed_offsets(tpl.clone(), Duration::from_secs(10)) {
                Ok(got) => break got,
                Err(e) if tries < 3 => {
                    tries += 1;
                    eprintln!("committed offsets of {group}: {e}; asking again");
                }
                Err(e) => panic!("committed offsets: {e}"),
            }
        };
        (0..partitions)
            .map(|p| match got.find_partition(topic, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => o,
                _ => -1,
            })
            .collect()
    }

    /// Commits `offsets` under `group` (the harness's workaround for tansu
    /// keeping SIGKILLed members: a restarted worker joins a fresh group that
    /// starts where the killed one had committed).
    pub fn copy_offsets(&self, from: &str, to: &str, topic: &str, partitions: i32) {
        let offsets = self.committed(from, topic, partitions);
        let mut tpl = TopicPartitionList::new();
        for (p, o) in offsets.iter().enumerate() {
            if *o >= 0 {
                tpl.add_partition_offset(topic, p as i32, Offset::Offset(*o)).unwrap();
            }
        }
        if tpl.count() > 0 {
            self.consumer(to).commit(&tpl, CommitMode::Sync).expect("commit copied offsets");
        }
    }

    /// Waits until `group` has committed the log end of every partition.
    /// Panics naming what was behind, so a broker stall reads as one.
    pub fn wait_committed_to_end(&self, group: &str, topic: &str, partitions: i32, timeout: Duration) {
        let end = self.log_end(topic, partitions);
        let deadline = Instant::now() + timeout;
        loop {
            let committed = self.committed(group, topic, partitions);
            // An empty partition has nothing to commit: none counts as its end.
            if committed.iter().zip(&end).all(|(c, e)| c == e || (*e == 0 && *c < 0)) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "group {group} committed {committed:?} of log end {end:?} after {timeout:?}: \
                 if the worker log shows no progress and no error, the broker's group coordinator stalled"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Every record of a topic, read from the beginning.
    pub fn read_all(&self, topic: &str, partitions: i32) -> Vec<OwnedMessage> {
        let end = self.log_end(topic, partitions);
        let total: i64 = end.iter().sum();
        let c = self.consumer(&random_name("reader"));
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
        }
        c.assign(&tpl).expect("assign");
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while (out.len() as i64) < total {
            assert!(Instant::now() < deadline, "read {} of {total} records of {topic}", out.len());
            if let Some(m) = c.poll(Duration::from_millis(200)) {
                out.push(m.expect("read record").detach());
            }
        }
        out
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What most tests start with: a Redis, a broker, a source topic with
/// `partitions` partitions and a one-partition dead-letter topic.
pub struct Stack {
    pub redis: Redis,
    pub broker: Broker,
    pub topic: String,
    pub dlq: String,
}

impl Stack {
    pub async fn start(partitions: i32) -> Stack {
        Stack::start_with(Redis::start(), partitions).await
    }

    pub async fn start_with(redis: Redis, partitions: i32) -> Stack {
        let broker = Broker::start();
        let topic = random_name("scores");
        let dlq = random_name("dlq");
        broker.create_topic(&topic, partitions).await;
        broker.create_topic(&dlq, 1).await;
        Stack { redis, broker, topic, dlq }
    }

    /// A new one-partition topic for admin events (name it in `WorkerConfig::admin_topics`).
    pub async fn admin_topic(&self) -> String {
        let admin = random_name("admin");
        self.broker.create_topic(&admin, 1).await;
        admin
    }
}

/// An admin event as a record to produce: key (the player), JSON value, timestamp now.
pub fn admin_record(event: serde_json::Value) -> (String, Vec<u8>, Option<i64>) {
    let player = event["player_id"].as_str().unwrap_or_default().to_string();
    (player, event.to_string().into_bytes(), Some(chrono::Utc::now().timestamp_millis()))
}

/// The settings a test worker runs with.
#[derive(Clone)]
pub struct WorkerConfig {
    pub brokers: String,
    pub redis_url: String,
    pub topic: String,
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
        }
    }

    pub fn render(&self) -> String {
        let mut opts = String::from("\"session.timeout.ms\" = 30000\n");
        for (k, v) in &self.extra_kafka_options {
            opts.push_str(&format!("\"{k}\" = \"{v}\"\n"));
        }
        let admin: Vec<String> = self.admin_topics.iter().map(|t| format!("\"{t}\"")).collect();
        format!(
            "[kafka]\nbrokers = \"{}\"\ntopics = [\"{}\"]\nadmin_topics = [{}]\ngroup_id = \"{}\"\ndead_letter_topic = \"{}\"\n[kafka.options]\n{opts}\n\
             [redis]\nurl = \"{}\"\n{}\n\n[http]\nlisten = \"127.0.0.1:{}\"\n{}\n\n[worker]\n{}\n{}",
            self.brokers,
            self.topic,
            admin.join(", "),
            self.group,
            self.dead_letter_topic,
            self.redis_url,
            self.redis_extra,
            self.http_port,
            self.http_extra,
            self.worker_section,
            self.boards
        )
    }
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
        let child = Command::new(env!("CARGO_BIN_EXE_rankflow"))
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

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    pub fn sigkill(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(&mut c);
        }
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
        if let Some(mut c) = self.child.take() {
            kill(&mut c);
        }
    }
}

fn as_json(body: String) -> serde_json::Value {
    serde_json::from_str(&body).unwrap_or_else(|_| serde_json::json!({ "raw": body }))
}

/// A minimal HTTP/1.1 GET over loopback; returns status and body.
pub async fn http_get(port: u16, path: &str) -> (u16, String) {
    http_request(port, &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")).await
}

/// A minimal HTTP/1.1 POST of a JSON body over loopback; returns status and body.
pub async fn http_post(port: u16, path: &str, body: &str) -> (u16, String) {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    http_request(port, &(head + body)).await
}

async fn http_request(port: u16, request: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect to rankflow http");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    let body = if text.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(&body) } else { body };
    (status, body)
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// Waits until `http://127.0.0.1:port/healthz` answers.
pub async fn wait_http(port: u16, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(Instant::now() < deadline, "rankflow http did not come up on {port}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A scoring event as a record to produce: key (the player), JSON value and
/// record timestamp; `attrs` is left out of the value when `None`.
pub fn event_record(
    kind: &str,
    player: &str,
    score: i64,
    ts: i64,
    record_ts: i64,
    attrs: Option<serde_json::Value>,
) -> (String, Vec<u8>, Option<i64>) {
    let mut v = serde_json::json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": kind, "player_id": player,
                                   "score": score, "ts": ts});
    if let Some(a) = attrs {
        v["attrs"] = a;
    }
    (player.to_string(), v.to_string().into_bytes(), Some(record_ts))
}

/// A sorted set's members and integer scores.
pub async fn zset_values(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> BTreeMap<String, i64> {
    let v: Vec<(String, f64)> =
        redis::cmd("ZRANGE").arg(key).arg(0).arg(-1).arg("WITHSCORES").query_async(conn).await.unwrap();
    v.into_iter().map(|(m, s)| (m, s as i64)).collect()
}

/// A dense index's value counts: value -> members holding it, read from the
/// `_dcount` hash (`key`), which holds only counts of 2 or more, and the
/// index beside it (a value there without a field is held once). Checks
/// the hash's pin (one other field, which keeps it a hash table rather than
/// a listpack scanned on every lookup), that no field holds less than 2 and
/// that every field's value is in the index.
pub async fn value_counts(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> HashMap<String, i64> {
    let mut all: HashMap<String, String> = redis::cmd("HGETALL").arg(key).query_async(conn).await.unwrap();
    if !all.is_empty() {
        let pin = all.remove("encoding").unwrap_or_else(|| panic!("{key} has no encoding pin"));
        assert!(pin.len() > 64, "the pin of {key} is longer than hash-max-listpack-value");
        let encoding: String = redis::cmd("OBJECT").arg("ENCODING").arg(key).query_async(conn).await.unwrap();
        assert_eq!(encoding, "hashtable", "{key} is a hash table");
    }
    let index: Vec<String> =
        redis::cmd("ZRANGE").arg(key.replace(":_dcount:", ":_dense:")).arg(0).arg(-1).query_async(conn).await.unwrap();
    let mut counts: HashMap<String, i64> = index.into_iter().map(|v| (v, 1)).collect();
    for (v, n) in all {
        let count: i64 = n.parse().unwrap_or_else(|_| panic!("{key}: count {n} of {v}"));
        assert!(count >= 2, "{key} keeps a count of {count} for {v}: only counts of 2 or more are kept");
        assert!(counts.insert(v.clone(), count).is_some(), "{key} counts {v}, which its index lacks");
    }
    counts
}

/// A record header's value as text.
pub fn header(m: &OwnedMessage, name: &str) -> Option<String> {
    use rdkafka::message::{Headers, Message};
    m.headers()?.iter().find(|h| h.key == name).and_then(|h| h.value).map(|v| String::from_utf8_lossy(v).into_owned())
}

/// A read's answer without what names the board or its cursors, or says
/// whether it was consistent: what two boards' answers share when they hold
/// the same entries (a sharded board and its unsharded reference).
pub fn plain(mut v: serde_json::Value) -> serde_json::Value {
    if let Some(o) = v.as_object_mut() {
        for k in ["board", "consistent", "next_cursor", "prev_cursor"] {
            o.remove(k);
        }
    }
    v
}

/// `lb:{points#3}:all` -> `lb:{points}:all`: the key the unsharded board would have.
pub fn unsharded_key(key: &str) -> String {
    match (key.find('#'), key.find('}')) {
        (Some(h), Some(b)) if h < b => format!("{}{}", &key[..h], &key[b..]),
        _ => key.to_string(),
    }
}

/// [`board_keys`] with each sharded board's shards put back together under
/// the unsharded board's keys (a member in two shards fails).
pub async fn merged_board_keys(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
) -> HashMap<String, HashMap<String, f64>> {
    let mut merged: HashMap<String, HashMap<String, f64>> = HashMap::new();
    for (key, members) in board_keys(conn, prefix).await {
        let into = merged.entry(unsharded_key(&key)).or_default();
        for (m, v) in members {
            assert!(into.insert(m.clone(), v).is_none(), "{m} is in two shards of {key}");
        }
    }
    merged
}

/// Every key under `prefix:` with its members and scores, for comparing
/// against a model. Internal keys (a segment starting with `_`) are left out.
pub async fn board_keys(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
) -> HashMap<String, HashMap<String, f64>> {
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{prefix}:*")).query_async(conn).await.unwrap();
    let mut out = HashMap::new();
    for k in keys {
        if k.split(':').any(|seg| seg.starts_with('_')) {
            continue;
        }
        let entries: Vec<(String, f64)> =
            redis::cmd("ZRANGE").arg(&k).arg(0).arg(-1).arg("WITHSCORES").query_async(conn).await.unwrap();
        out.insert(k, entries.into_iter().collect());
    }
    out
}

/// What one [`RedisCluster::fail_over`] did.
#[derive(Debug)]
pub struct Failover {
    /// From the kill to a replica serving the slot with the cluster ok.
    pub outage: Duration,
    /// Replication-stream bytes the dead primary had that its replica had
    /// not acknowledged at the kill (> 0: the failover lost writes that
    /// were not waited for).
    pub unreplicated_bytes: i64,
}

/// A local Redis Cluster of `redis-server` processes, joined with
/// `redis-cli --cluster create` (with replicas: `--cluster-replicas`, and a
/// short `cluster-node-timeout`, so that a dead primary's replica takes over
/// within about two seconds).
pub struct RedisCluster {
    nodes: Vec<Redis>,
}

impl RedisCluster {
    pub fn start(masters: usize) -> RedisCluster {
        RedisCluster::start_with_replicas(masters, 0)
    }

    pub fn start_with_replicas(masters: usize, replicas: usize) -> RedisCluster {
        let nodes: Vec<Redis> = (0..masters * (1 + replicas))
            .map(|_| {
                Redis::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "1000",
                    "--appendonly",
                    "no",
                ])
            })
            .collect();
        let addrs: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli is installed (scripts/setup.sh)");
        assert!(out.status.success(), "cluster create: {}", String::from_utf8_lossy(&out.stdout));
        let cluster = RedisCluster { nodes };
        cluster.wait_ok();
        if replicas > 0 {
            for i in 0..cluster.nodes.len() {
                if cluster.role(i).as_deref() == Some("slave") {
                    cluster.wait_replica_synced(i);
                }
            }
        }
        cluster
    }

    fn cli(&self, node: usize, args: &[&str]) -> Option<String> {
        let out =
            Command::new("redis-cli").args(["-p", &self.nodes[node].port.to_string()]).args(args).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn alive(&self, node: usize) -> bool {
        self.nodes[node].child.is_some()
    }

    /// `master` or `slave`, as the node says (`None`: not answering).
    fn role(&self, node: usize) -> Option<String> {
        self.cli(node, &["ROLE"])?.lines().next().map(str::to_string).filter(|r| !r.is_empty())
    }

    /// Every live node reports `cluster_state:ok`.
    pub fn wait_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        for n in (0..self.nodes.len()).filter(|&n| self.alive(n)) {
            while !self.cli(n, &["CLUSTER", "INFO"]).is_some_and(|i| i.contains("cluster_state:ok")) {
                assert!(Instant::now() < deadline, "the cluster did not reach state ok");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// The node serving `key`'s slot, as the live nodes see it.
    pub fn master_of(&self, key: &str) -> usize {
        self.try_master_of(key).unwrap_or_else(|| panic!("no primary serves the slot of {key}"))
    }

    /// The node serving `key`'s slot; `None` while none does (a failover).
    fn try_master_of(&self, key: &str) -> Option<usize> {
        let any = (0..self.nodes.len()).find(|&n| self.alive(n)).expect("a live node");
        let slot: u16 = self.cli(any, &["CLUSTER", "KEYSLOT", key])?.trim().parse().ok()?;
        let nodes = self.cli(any, &["CLUSTER", "NODES"])?;
        for line in nodes.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if !f[2].contains("master") || f[2].contains("fail") {
                continue;
            }
            let serves = f[8..].iter().any(|range| match range.split_once('-') {
                Some((a, b)) => (a.parse::<u16>().unwrap()..=b.parse::<u16>().unwrap()).contains(&slot),
                None => range.parse::<u16>().ok() == Some(slot),
            });
            if serves {
                let port: u16 = f[1].split('@').next().unwrap().rsplit_once(':').unwrap().1.parse().unwrap();
                return self.nodes.iter().position(|n| n.port == port);
            }
        }
        None
    }

    /// `kill -9` of `key`'s primary; returns once its replica serves the
    /// slot and the cluster is ok again, then restarts the dead node (empty,
    /// it rejoins as the new primary's replica) and waits for it to sync.
    ///
    /// `lag`: that long before the kill, the replica is frozen (SIGSTOP)
    /// and the primary drops its link, as with a replica cut off by the
    /// network; it is thawed right after the kill. The primary's writes of
    /// that time are on no replica when it dies.
    pub fn fail_over(&mut self, key: &str, lag: Duration) -> Failover {
        let old = self.master_of(key);
        let port = self.nodes[old].port.to_string();
        let replica = (0..self.nodes.len())
            .filter(|&n| n != old && self.alive(n))
            .find_map(|n| {
                let role = self.cli(n, &["ROLE"])?;
                let f: Vec<&str> = role.lines().collect();
                (f.first() == Some(&"slave") && f.get(2) == Some(&port.as_str())).then_some(n)
            })
            .expect("the primary has a replica");
        // The replica's own offset, then (after the lag) the primary's: the
        // bytes between are the writes the replica lacks at the kill.
        let offset_of = |info: Option<String>, field: &str| -> i64 {
            info.unwrap_or_default()
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        let lagging = !lag.is_zero();
        if lagging {
            // Frozen, it cannot reconnect once the primary drops the link;
            // what the primary writes from then on reaches no replica.
            self.nodes[replica].pause();
            self.cli(old, &["CLIENT", "KILL", "TYPE", "replica"]).expect("drop the replica link");
            std::thread::sleep(lag);
        }
        let primary = offset_of(self.cli(old, &["INFO", "replication"]), "master_repl_offset:");
        let replica_at =
            (!lagging).then(|| offset_of(self.cli(replica, &["INFO", "replication"]), "slave_repl_offset:"));
        let started = Instant::now();
        self.nodes[old].stop();
        if lagging {
            self.nodes[replica].resume();
        }
        let replica_at =
            replica_at.unwrap_or_else(|| offset_of(self.cli(replica, &["INFO", "replication"]), "slave_repl_offset:"));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            std::thread::sleep(Duration::from_millis(100));
            let any = (0..self.nodes.len()).find(|&n| self.alive(n)).unwrap();
            let ok = self.cli(any, &["CLUSTER", "INFO"]).is_some_and(|i| i.contains("cluster_state:ok"));
            if ok && self.try_master_of(key).is_some_and(|m| m != old) {
                break;
            }
            assert!(Instant::now() < deadline, "no replica took over within 30 s");
        }
        let outage = started.elapsed();
        self.nodes[old].restart();
        self.wait_ok();
        self.wait_replica_synced(old);
        Failover { outage, unreplicated_bytes: (primary - replica_at).max(0) }
    }

    fn wait_replica_synced(&self, node: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let info = self.cli(node, &["INFO", "replication"]).unwrap_or_default();
            if info.contains("role:slave") && info.contains("master_link_status:up") {
                return;
            }
            assert!(Instant::now() < deadline, "node {node} did not sync as a replica: {info}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A seed node's URL.
    pub fn url(&self) -> String {
        self.nodes[0].url()
    }

    /// Every node's URL (a client seeds from all, so that any may be down).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Redis::url).collect()
    }

    /// The board keys of every primary, merged, and how many primaries hold any.
    pub async fn board_keys(&self, prefix: &str) -> (HashMap<String, HashMap<String, f64>>, usize) {
        let mut all = HashMap::new();
        let mut holding = 0;
        for (i, n) in self.nodes.iter().enumerate() {
            if !self.alive(i) || self.role(i).as_deref() != Some("master") {
                continue;
            }
            let mut conn = n.conn().await;
            let keys = board_keys(&mut conn, prefix).await;
            if !keys.is_empty() {
                holding += 1;
            }
            all.extend(keys);
        }
        (all, holding)
    }
}

/// Every `_offsets` hash field that names `topic`, over all board tags, with
/// the offset it records.
pub async fn topic_offsets(conn: &mut redis::aio::MultiplexedConnection, topic: &str) -> Vec<(String, i64)> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("lb:*:_offsets").query_async(conn).await.unwrap();
    let mut out = Vec::new();
    for k in keys {
        let fields: Vec<(String, i64)> = redis::cmd("HGETALL").arg(&k).query_async(conn).await.unwrap();
        out.extend(fields.into_iter().filter(|(f, _)| f.starts_with(&format!("{topic}:"))));
    }
    out
}

/// How many `_offsets` hash fields name `topic`.
pub async fn offsets_fields(conn: &mut redis::aio::MultiplexedConnection, topic: &str) -> usize {
    topic_offsets(conn, topic).await.len()
}

/// How many records of `topic` the boards have applied: per partition, the
/// furthest offset any board tag has recorded, plus one, summed.
pub async fn applied(conn: &mut redis::aio::MultiplexedConnection, topic: &str) -> i64 {
    let mut furthest: HashMap<String, i64> = HashMap::new();
    for (f, o) in topic_offsets(conn, topic).await {
        let e = furthest.entry(f).or_insert(-1);
        *e = (*e).max(o);
    }
    furthest.values().map(|o| o + 1).sum()
}

/// The read tests' boards: member and earliest ties on `desc` boards (best
/// and sum), and an `asc` board split by track.
pub const READ_BOARDS: &str = r#"
[[board]]
id = "member"
on = ["match"]
mode = "best"
periods = ["all_time", "daily"]

[[board]]
id = "earliest"
on = ["match"]
mode = "best"
periods = ["all_time"]
tie_break = "earliest"

[[board]]
id = "total"
on = ["match"]
mode = "sum"
periods = ["all_time"]
tie_break = "earliest"

[[board]]
id = "laps"
on = ["lap"]
mode = "best"
order = "asc"
periods = ["all_time"]
split_by = "track"
"#;

/// Runs `cfg`'s worker over `topics` (name, partitions) and SIGKILLs it five
/// times at random moments once it applies again after each restart (a
/// moment brought forward when it gets through its share of what is left of
/// `total` records, so every kill lands inside the stream). After each kill
/// it goes on under a fresh group with the committed offsets copied (tansu
/// may keep a SIGKILLed member). Returns, per kill, what Redis had applied
/// of each topic at that moment.
pub async fn five_sigkills(
    cfg: &mut WorkerConfig,
    broker: &Broker,
    conn: &mut redis::aio::MultiplexedConnection,
    topics: &[(&str, i32)],
    total: i64,
    seed: u64,
) -> Vec<Vec<i64>> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let per_topic = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        let names: Vec<String> = topics.iter().map(|(t, _)| t.to_string()).collect();
        async move {
            let mut out = Vec::with_capacity(names.len());
            for t in &names {
                out.push(applied(&mut conn, t).await);
            }
            out
        }
    };
    let (mut last, mut kills) = (0, Vec::new());
    for kill in 0..5 {
        let mut w = Worker::spawn(cfg);
        let deadline = Instant::now() + Duration::from_secs(120);
        while per_topic(conn).await.iter().sum::<i64>() <= last {
            assert!(Instant::now() < deadline, "no progress past {last} after restart {kill}\n{}", w.log());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let moment = Instant::now() + Duration::from_millis(rng.random_range(50..1500));
        let share = last + (total - last) / (6 - kill);
        while Instant::now() < moment && per_topic(conn).await.iter().sum::<i64>() < share {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        w.sigkill();
        let at_kill = per_topic(conn).await;
        last = at_kill.iter().sum();
        kills.push(at_kill);
        let next = random_name("group");
        for (t, partitions) in topics {
            broker.copy_offsets(&cfg.group, &next, t, *partitions);
        }
        cfg.group = next;
    }
    kills
}
