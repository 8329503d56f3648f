//! The Kafka-compatible broker the tests run on: tansu with sqlite storage,
//! and what a test asks of it (topics, producing, committed offsets,
//! reading a topic back).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::OwnedMessage;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

use super::tls::{self, Pki, TlsEndpoint, KAFKA_ADMIN, KAFKA_ADMIN_PASSWORD, KAFKA_PASSWORD, KAFKA_USER};
use super::{end, free_port, log_tail, random_name, start_retrying, temp_dir, wait_listening};

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
    /// Reached only through TLS and SASL ([`Broker::start_secured`]).
    secured: Option<Secured>,
}

/// What makes a broker secured: the TLS endpoint clients reach it by (the
/// port it advertises), and the harness's own SASL options.
struct Secured {
    endpoint: TlsEndpoint,
    options: Vec<(String, String)>,
}

impl Broker {
    /// A broker on a free port; if it exits before it listens (the port
    /// taken between our pick and its bind), on another.
    pub fn start() -> Broker {
        let mut b = Broker { child: None, port: free_port(), dir: temp_dir(), secured: None };
        b.spawn(3, None);
        b
    }

    /// A broker every client reaches over TLS (an endpoint in front of it,
    /// see `tls`) and must authenticate to with SCRAM-SHA-512: as
    /// [`KAFKA_USER`] (rankflow) or the harness's own user. The users are
    /// made while it runs without authentication, then it is restarted
    /// with `--authentication`, advertising only the TLS endpoint.
    pub fn start_secured(pki: &Pki) -> Broker {
        let tls_port = TlsEndpoint::pick_port();
        let mut b = Broker { child: None, port: free_port(), dir: temp_dir(), secured: None };
        b.spawn(3, Some(tls_port));
        for (user, password) in [(KAFKA_USER, KAFKA_PASSWORD), (KAFKA_ADMIN, KAFKA_ADMIN_PASSWORD)] {
            tls::tansu_user(&tansu_bin(), b.port, user, password);
        }
        b.stop();
        b.spawn_with(1, Some(tls_port), true);
        let endpoint = TlsEndpoint::start(pki, tls_port, b.port);
        b.secured = Some(Secured { endpoint, options: pki.kafka_options(KAFKA_ADMIN, KAFKA_ADMIN_PASSWORD) });
        b
    }

    /// The port clients are told to use: the TLS endpoint's when secured.
    fn advertised(&self) -> Option<u16> {
        self.secured.as_ref().map(|s| s.endpoint.port)
    }

    /// Starts the broker, in up to `attempts` attempts, each after the
    /// first on a new port (a restart keeps its port: one attempt).
    fn spawn(&mut self, attempts: u32, advertised: Option<u16>) {
        self.spawn_with(attempts, advertised, false)
    }

    /// [`Broker::spawn`], advertising `advertised` (this port if none),
    /// requiring SASL with `authentication`.
    fn spawn_with(&mut self, attempts: u32, advertised: Option<u16>, authentication: bool) {
        let started = start_retrying("tansu", attempts, |n| {
            if n > 1 {
                self.port = free_port();
            }
            self.try_spawn(advertised, authentication)
        });
        if let Err(why) = started {
            panic!("tansu: {why}\n{}", log_tail(&self.dir.path().join("broker.log"), 10));
        }
    }

    fn try_spawn(&mut self, advertised: Option<u16>, authentication: bool) -> Result<(), String> {
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let advertised = format!("tcp://127.0.0.1:{}", advertised.unwrap_or(self.port));
        let marker = self.dir.path().file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("broker.log"))
            .expect("broker log");
        let child = Command::new(tansu_bin())
            .arg("broker")
            .args(["--listener-url", &url, "--advertised-listener-url", &advertised])
            .args(authentication.then_some("--authentication"))
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
        wait_listening(&mut self.child, self.port, Duration::from_secs(30))?;
        index_tansu_headers(&self.dir.path().join("broker.db"));
        Ok(())
    }

    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.advertised().unwrap_or(self.port))
    }

    pub fn stop(&mut self) {
        end(&mut self.child);
    }

    pub fn restart(&mut self) {
        self.stop();
        self.spawn_with(1, self.advertised(), self.secured.is_some());
    }

    fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.brokers());
        for (k, v) in self.secured.iter().flat_map(|s| &s.options) {
            c.set(k, v);
        }
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

    /// A topic of its own for sealed tops (`[sealing] topic`), one partition.
    pub async fn sealed_topic(&self) -> String {
        let sealed = random_name("sealed");
        self.create_topic(&sealed, 1).await;
        sealed
    }

    /// A one-partition topic for admin events (name it in `WorkerConfig::admin_topics`).
    pub async fn admin_topic(&self) -> String {
        let admin = random_name("admin");
        self.create_topic(&admin, 1).await;
        admin
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
