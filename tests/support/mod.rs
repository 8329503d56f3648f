//! The one test harness every integration test uses: a real `redis-server`
//! and Apache Kafka (`scripts/kafka.sh`) on free loopback ports in a
//! temporary directory, random topic and group names, the rankflow binary as
//! a child process, and helpers that read committed offsets and topics.
//! Everything started here is stopped on `Drop`. Every process's command line
//! carries `rankflow-test-`, so `scripts/test.sh` can end any that a killed
//! test run left behind.
#![allow(dead_code)]

pub mod apply;
pub mod browser;
pub mod changes;
pub mod columns;
pub mod curl;
pub mod encode;
mod http;
mod kafka;
mod keys;
pub mod league;
pub mod nginx;
pub mod periods;
mod redis_server;
pub mod stream;
pub mod teams;
pub mod tls;
mod worker;

// Each test crate uses some of these: the others are unused there.
#[allow(unused_imports)]
pub use self::{
    http::{http_get, http_post, wait_http, KeepAlive},
    kafka::Broker,
    keys::*,
    redis_server::{Failover, Redis, RedisCluster},
    worker::{run_rankflow, samples, sum, Worker, WorkerConfig},
};

use std::net::TcpListener;
use std::process::Child;
use std::time::{Duration, Instant};

use rdkafka::message::OwnedMessage;

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

/// A path in the repository (this crate is `tests/support`).
pub fn repo_path(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(rel)
}

/// The `rankflow` binary cargo built for the test running now: beside the
/// `deps/` folder that holds the test binary (where `CARGO_BIN_EXE_rankflow`
/// points, which only a test of the rankflow package itself is given).
pub fn rankflow_bin() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps");
    let bin = dir.join(format!("rankflow{}", std::env::consts::EXE_SUFFIX));
    assert!(bin.exists(), "{} is built by `cargo test` before the integration tests", bin.display());
    bin
}

pub fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("rankflow-test-").tempdir().expect("temp dir")
}

pub fn random_name(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// Waits until `port` takes connections on a socket of the process in
/// `child` (not of another that took the port between our pick and its
/// bind: ours then fails to bind and exits). Fails at once when the child
/// exits first (it could not bind, say), leaving `None`, and after
/// `timeout`, having killed it.
fn wait_listening(child: &mut Option<Child>, port: u16, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
            *child = None;
            return Err(format!("exited ({status}) before listening on port {port}"));
        }
        let pid = child.as_ref().map(|c| c.id());
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() && pid.is_some_and(|p| listens_on(p, port)) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            end(child);
            return Err(format!("did not listen on port {port} within {timeout:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` holds the socket listening on loopback `port`:
/// the listener's inode (`/proc/net/tcp`, state `0A`) among its open files.
fn listens_on(pid: u32, port: u16) -> bool {
    let listener = format!("0100007F:{port:04X}");
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let inodes: Vec<String> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() > 9 && f[1] == listener && f[3] == "0A")
        .map(|f| format!("socket:[{}]", f[9]))
        .collect();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|link| inodes.iter().any(|i| link.as_os_str() == i.as_str())))
}

/// Starts a server of ours: `attempt(n)` for n = 1, 2, ... up to
/// `attempts`, until one answers `Ok` (each attempt after the first may move
/// the server to another port first). Says why each failed attempt but the
/// last failed, and answers the last one's error.
fn start_retrying(what: &str, attempts: u32, mut attempt: impl FnMut(u32) -> Result<(), String>) -> Result<(), String> {
    let mut n = 1;
    loop {
        match attempt(n) {
            Err(why) if n < attempts => {
                eprintln!("{what}: {why}; starting it again");
                std::thread::sleep(Duration::from_millis(200));
                n += 1;
            }
            done => return done,
        }
    }
}

/// The last `n` lines of the file at `path` (empty when it cannot be read).
fn log_tail(path: &std::path::Path, n: usize) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

pub fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Kills and reaps the process in `child`, if any, leaving `None`.
pub fn end(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        kill(&mut c);
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
        Stack::start_on(redis, Broker::start(), partitions).await
    }

    /// A stack on `broker` (one of the test's own, say).
    pub async fn start_on(redis: Redis, broker: Broker, partitions: i32) -> Stack {
        let topic = random_name("scores");
        let dlq = random_name("dlq");
        broker.create_topic(&topic, partitions).await;
        broker.create_topic(&dlq, 1).await;
        Stack { redis, broker, topic, dlq }
    }

    /// A topic of its own for sealed tops (`[sealing] topic`), one partition.
    pub async fn sealed_topic(&self) -> String {
        self.broker.sealed_topic().await
    }

    /// A one-partition topic for admin events (name it in `WorkerConfig::admin_topics`).
    pub async fn admin_topic(&self) -> String {
        self.broker.admin_topic().await
    }
}

/// An admin event as a record to produce: key (the player), JSON value, timestamp now.
pub fn admin_record(event: serde_json::Value) -> (String, Vec<u8>, Option<i64>) {
    let player = event["player_id"].as_str().unwrap_or_default().to_string();
    (player, event.to_string().into_bytes(), Some(chrono::Utc::now().timestamp_millis()))
}

/// A record to produce: key, value and record timestamp.
pub type Record = (String, Vec<u8>, Option<i64>);

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

/// Half of `records` on the stack's topic, a worker killed 2.5 s into them,
/// the rest to a worker restarted in the same group; returns the worker
/// that drained them all.
pub async fn killed_mid_stream(stack: &Stack, cfg: &WorkerConfig, records: &[Record], partitions: i32) -> Worker {
    let half = records.len() / 2;
    stack.broker.produce(&stack.topic, &records[..half]).await;
    let mut w = Worker::spawn(cfg);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    w.sigkill();
    stack.broker.produce(&stack.topic, &records[half..]).await;
    let w = Worker::spawn(cfg);
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, partitions, Duration::from_secs(120));
    wait_http(w.http_port, Duration::from_secs(10)).await;
    w
}

/// Runs `cfg`'s worker over `topics` (name, partitions) and SIGKILLs it five
/// times at random moments once it applies again after each restart (a
/// moment brought forward when it gets through its share of what is left of
/// `total` records, so every kill lands inside the stream). After each kill
/// it is started again in the same group. Returns, per kill, what Redis had
/// applied of each topic at that moment.
pub async fn five_sigkills(
    cfg: &WorkerConfig,
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
    }
    kills
}

/// Every YAML document of a file, as JSON (read by Python's yaml, which
/// kubernetes-validate brings).
pub fn yaml_documents(path: &std::path::Path) -> Vec<serde_json::Value> {
    let py = "import sys, json, yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d]))";
    let o = std::process::Command::new("python3").args(["-c", py]).arg(path).output().expect("python3");
    assert!(o.status.success(), "{}: {}", path.display(), String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A number of an `INFO` text's line `field:...` (for a command's stats,
/// its `calls=`); 0 where absent.
pub fn info_number(info: &str, field: &str) -> i64 {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().split(',').next().map(str::to_string))
        .and_then(|v| v.split('=').next_back().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}
