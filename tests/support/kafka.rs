//! The broker the tests run on: Apache Kafka in KRaft mode, started by
//! `scripts/kafka.sh` (its jars from Maven Central), and what a test asks of
//! it (topics, producing, committed offsets, reading a topic back).
//!
//! A JVM broker takes seconds to start, so tests that only use a broker
//! share one: the suite's (`scripts/test.sh` starts it and names it in
//! `TEST_KAFKA_BROKERS`), or else one per test binary, started on first use
//! and stopped when the binary exits. Every test has topics and groups of
//! its own (random names). A test that stops, kills or reconfigures a
//! broker has one of its own ([`Broker::start_own`],
//! [`Broker::start_cluster`], [`Broker::start_secured`]).

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::OwnedMessage;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

use super::tls::{Pki, KAFKA_ADMIN, KAFKA_ADMIN_PASSWORD, KAFKA_PASSWORD, KAFKA_USER};
use super::{random_name, temp_dir};

/// A broker (or a cluster of them) and the harness's client options for it.
pub struct Broker {
    bootstrap: String,
    /// The nodes of a broker of this test's own; `None` for the shared one.
    own: Option<Nodes>,
    /// The harness's own client options (SASL_SSL on a secured broker).
    options: Vec<(String, String)>,
    /// The replication factor of the topics the harness creates.
    replication: i32,
}

/// Nodes `scripts/kafka.sh` started in a directory of their own: stopped
/// on drop, and by the script itself once this test process ends (a
/// binary's shared broker is never dropped).
struct Nodes {
    dir: tempfile::TempDir,
}

fn kafka_sh() -> PathBuf {
    crate::repo_path("scripts/kafka.sh")
}

impl Nodes {
    /// `scripts/kafka.sh start` with `args` in a new directory; the
    /// bootstrap address. A start that fails (a port picked free and taken
    /// before the broker bound it) is tried again in a new directory.
    fn start(args: &[String]) -> (Nodes, String) {
        let mut last = String::new();
        let pid = std::process::id().to_string();
        for _ in 0..3 {
            let nodes = Nodes { dir: temp_dir() };
            let dir = nodes.dir.path().display().to_string();
            let mut all = vec!["start", "--dir", &dir, "--watch", &pid];
            all.extend(args.iter().map(String::as_str));
            match nodes.run(&all) {
                Ok(out) => return (nodes, out.lines().last().unwrap_or_default().to_string()),
                Err(why) => {
                    eprintln!("scripts/kafka.sh start: {why}; starting it again");
                    last = why;
                }
            }
        }
        panic!("Apache Kafka did not start: {last}")
    }

    /// `scripts/kafka.sh` with `args`: its standard output, or why it failed.
    fn run(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new(kafka_sh()).args(args).output().map_err(|e| format!("scripts/kafka.sh: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// `scripts/kafka.sh <cmd> --dir <dir>` and `args`, which must succeed.
    fn must(&self, cmd: &str, args: &[&str]) {
        let dir = self.dir.path().display().to_string();
        if let Err(why) = self.run(&[&[cmd, "--dir", &dir], args].concat()) {
            panic!("scripts/kafka.sh {cmd} {args:?}: {why}");
        }
    }
}

impl Nodes {
    /// What each node went through, printed when a test fails: the last
    /// lines of its log (warnings, fences, the controller's slow events) and
    /// its JVM's pauses of 100 ms or more.
    fn report(&self) {
        let Ok(entries) = std::fs::read_dir(self.dir.path()) else { return };
        let mut nodes: Vec<PathBuf> =
            entries.flatten().map(|e| e.path()).filter(|p| p.join("broker.log").exists()).collect();
        nodes.sort();
        for node in nodes {
            let log = std::fs::read_to_string(node.join("broker.log")).unwrap_or_default();
            let lines: Vec<&str> = log.lines().filter(|l| l.starts_with('[')).collect();
            eprintln!("---- {} (last lines of its log) ----", node.display());
            for line in &lines[lines.len().saturating_sub(20)..] {
                eprintln!("{}", line.chars().take(300).collect::<String>());
            }
            let gc = std::fs::read_to_string(node.join("gc.log")).unwrap_or_default();
            let long = |l: &&str| {
                l.contains("Pause")
                    && l.split_whitespace()
                        .last()
                        .and_then(|t| t.strip_suffix("ms"))
                        .and_then(|t| t.parse::<f64>().ok())
                        .is_some_and(|ms| ms >= 100.0)
            };
            for line in gc.lines().filter(long) {
                eprintln!("{line}");
            }
        }
    }
}

impl Drop for Nodes {
    /// Never panics (a drop while a failed test unwinds would abort): a stop
    /// that fails is left to `--watch`, which stops the nodes when the
    /// test process ends.
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.report();
        }
        let dir = self.dir.path().display().to_string();
        if let Err(why) = self.run(&["stop", "--dir", &dir, "--kill"]) {
            eprintln!("scripts/kafka.sh stop: {why}");
        }
    }
}

impl Broker {
    /// The broker tests share: the suite's, or this binary's own.
    pub fn start() -> Broker {
        static SHARED: OnceLock<String> = OnceLock::new();
        let bootstrap = SHARED.get_or_init(|| match std::env::var("TEST_KAFKA_BROKERS") {
            Ok(b) if !b.is_empty() => b,
            _ => {
                let (nodes, bootstrap) = Nodes::start(&[]);
                // Stopped, and its directory removed, by scripts/kafka.sh once this process ends.
                std::mem::forget(nodes);
                bootstrap
            }
        });
        Broker { bootstrap: bootstrap.clone(), own: None, options: Vec::new(), replication: 1 }
    }

    /// A broker of this test's own, which it may stop, restart or kill.
    pub fn start_own() -> Broker {
        Broker::own(&[], 1, Vec::new())
    }

    /// Nodes of this test's own, started with `scripts/kafka.sh start` and
    /// `args`; the harness's topics get `replication` replicas and its
    /// clients `options`.
    fn own(args: &[String], replication: i32, options: Vec<(String, String)>) -> Broker {
        let (nodes, bootstrap) = Nodes::start(args);
        Broker { bootstrap, own: Some(nodes), options, replication }
    }

    /// A cluster of `nodes` brokers of this test's own (each also a KRaft
    /// controller): topics replicated to all of them, `min.insync.replicas`
    /// 2 when there are three or more.
    pub fn start_cluster(nodes: usize) -> Broker {
        Broker::own(&["--nodes".into(), nodes.to_string()], nodes as i32, Vec::new())
    }

    /// A broker every client reaches only over TLS (the broker's own, with
    /// the PKI's certificate for 127.0.0.1) and must authenticate to, with
    /// SCRAM-SHA-512 or PLAIN, as [`KAFKA_USER`] (rankflow) or the
    /// harness's own user; the broker checks both mechanisms' passwords.
    pub fn start_secured(pki: &Pki) -> Broker {
        Broker::secured_with(pki, "")
    }

    /// [`Broker::start_secured`] with more lines of `server.properties`.
    fn secured_with(pki: &Pki, more: &str) -> Broker {
        let props = pki.path("kafka-broker.properties");
        std::fs::write(&props, pki.kafka_broker_properties() + more).expect("broker properties");
        let mut args: Vec<String> =
            ["--protocol", "SASL_SSL", "--properties", &props.display().to_string()].map(String::from).into();
        for (user, password) in [(KAFKA_USER, KAFKA_PASSWORD), (KAFKA_ADMIN, KAFKA_ADMIN_PASSWORD)] {
            args.extend(["--scram".into(), format!("SCRAM-SHA-512:{user}:{password}")]);
        }
        Broker::own(&args, 1, pki.kafka_options(KAFKA_ADMIN, KAFKA_ADMIN_PASSWORD))
    }

    /// [`Broker::start_secured`], authorizing every request: only the
    /// harness's user (and the broker's own listeners) may do anything
    /// before [`Broker::grant`] allows more.
    pub fn start_authorizing(pki: &Pki) -> Broker {
        Broker::secured_with(
            pki,
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n\
             super.users=User:ANONYMOUS;User:harness\nallow.everyone.if.no.acl.found=false\n",
        )
    }

    /// Grants ACLs of a [`Broker::start_authorizing`] broker, as its super
    /// user: each `RESOURCE:PATTERN:NAME:PRINCIPAL:OPERATION` (see tests/grant_acls.py).
    pub fn grant(&self, pki: &Pki, specs: &[String]) {
        let out = std::process::Command::new("python3")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../grant_acls.py"))
            .args([&self.brokers(), &pki.path("ca.crt").display().to_string(), KAFKA_ADMIN, KAFKA_ADMIN_PASSWORD])
            .args(specs)
            .output()
            .expect("python3 runs");
        assert!(out.status.success(), "grant_acls.py: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Waits until every partition of each of `topics` has all its
    /// replicas in sync (after a node's restart), at most `timeout`.
    pub fn wait_in_sync(&self, topics: &[&str], timeout: Duration) {
        let c: BaseConsumer = self.client().create().expect("metadata client");
        let deadline = Instant::now() + timeout;
        loop {
            let mut behind = Vec::new();
            for topic in topics {
                let md = c.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("metadata");
                for t in md.topics() {
                    for p in t.partitions() {
                        if p.isr().len() < p.replicas().len() || p.leader() < 0 {
                            behind.push(format!("{}/{} isr {:?}", t.name(), p.id(), p.isr()));
                        }
                    }
                }
            }
            if behind.is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "replicas out of sync after {timeout:?}: {behind:?}");
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn nodes(&self) -> &Nodes {
        self.own.as_ref().expect("only a broker of the test's own (Broker::start_own) is stopped or killed")
    }

    pub fn brokers(&self) -> String {
        self.bootstrap.clone()
    }

    /// Stops every node (SIGTERM, a clean shutdown).
    pub fn stop(&mut self) {
        self.nodes().must("stop", &[]);
    }

    /// Starts again every node that is not running, on the same ports with the same data.
    pub fn restart(&mut self) {
        self.stop();
        self.nodes().must("start", &[]);
    }

    /// SIGKILLs node `node` (1-based; its KRaft node id).
    pub fn kill_node(&self, node: i32) {
        self.nodes().must("stop", &["--node", &node.to_string(), "--kill"]);
    }

    /// Starts node `node` again (after [`Broker::kill_node`]) and waits until it has started.
    pub fn start_node(&self, node: i32) {
        self.nodes().must("start", &["--node", &node.to_string()]);
    }

    /// The node id leading each partition of `topic` (-1 where none does).
    pub fn leaders(&self, topic: &str) -> Vec<i32> {
        let c: BaseConsumer = self.client().create().expect("metadata client");
        let md = c.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("metadata");
        let t = md.topics().iter().find(|t| t.name() == topic).expect("the topic's metadata");
        let mut parts: Vec<(i32, i32)> = t.partitions().iter().map(|p| (p.id(), p.leader())).collect();
        parts.sort();
        parts.into_iter().map(|(_, leader)| leader).collect()
    }

    fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.brokers());
        for (k, v) in &self.options {
            c.set(k, v);
        }
        c
    }

    pub async fn create_topic(&self, name: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> = self.client().create().expect("admin client");
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        let res = admin
            .create_topics(&[NewTopic::new(name, partitions, TopicReplication::Fixed(self.replication))], &opts)
            .await
            .expect("create topic");
        for r in res {
            r.unwrap_or_else(|(t, e)| panic!("create topic {t}: {e}"));
        }
    }

    /// The harness's producer: idempotent, so a retry across a leader's
    /// failover never writes a record twice (the tests' models count each
    /// record they produce once).
    pub fn producer(&self) -> FutureProducer {
        self.client()
            .set("linger.ms", "5")
            .set("message.timeout.ms", "60000")
            .set("enable.idempotence", "true")
            .create()
            .expect("producer")
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
        self.produce_paced_until(topic, records, slice, pause, Arc::default())
    }

    /// As [`Broker::produce_paced`], without pausing once `hurry` is set: a
    /// stream slow enough to still be going when the test acts on a loaded
    /// machine, whose rest comes at once after.
    pub fn produce_paced_until(
        &self,
        topic: &str,
        records: Vec<(String, Vec<u8>, Option<i64>)>,
        slice: usize,
        pause: Duration,
        hurry: Arc<AtomicBool>,
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
                if !hurry.load(Ordering::Relaxed) {
                    tokio::time::sleep(pause).await;
                }
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

    /// The high watermark of every partition, as a `read_uncommitted`
    /// client sees it (a `read_committed` one is told the last stable offset).
    pub fn high_watermarks(&self, topic: &str, partitions: i32) -> Vec<i64> {
        let c: BaseConsumer = self
            .client()
            .set("group.id", random_name("watermarks"))
            .set("isolation.level", "read_uncommitted")
            .create()
            .expect("consumer");
        (0..partitions).map(|p| watermarks(&c, topic, p).1).collect()
    }

    /// High watermark (log end) of every partition.
    pub fn log_end(&self, topic: &str, partitions: i32) -> Vec<i64> {
        let c = self.consumer(&random_name("watermarks"));
        (0..partitions).map(|p| watermarks(&c, topic, p).1).collect()
    }

    /// A group's committed offset per partition (-1 where none).
    pub fn committed(&self, group: &str, topic: &str, partitions: i32) -> Vec<i64> {
        let c = self.consumer(group);
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(topic, p);
        }
        // A group coordinator still loading (the offsets topic is made on a
        // broker's first group lookup, and moves with a failover) or a lookup
        // timed out on a loaded machine: asked again, for 60 s at most.
        let deadline = Instant::now() + Duration::from_secs(60);
        let got = loop {
            match c.committed_offsets(tpl.clone(), Duration::from_secs(10)) {
                Ok(got) => break got,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("committed offsets of {group}: {e}; asking again");
                    std::thread::sleep(Duration::from_millis(250));
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

    /// Waits until `group` has committed the log end of every partition.
    /// Panics naming what was behind, so a broker stall reads as one.
    pub fn wait_committed_to_end(&self, group: &str, topic: &str, partitions: i32, timeout: Duration) {
        self.wait_committed_to_end_or(group, topic, partitions, timeout, &String::new)
    }

    /// [`Broker::wait_committed_to_end`], with `logs` (the workers') in the panic.
    pub fn wait_committed_to_end_or(
        &self,
        group: &str,
        topic: &str,
        partitions: i32,
        timeout: Duration,
        logs: &dyn Fn() -> String,
    ) {
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
                 if the worker log shows no progress and no error, the broker's group coordinator stalled\n{}",
                logs()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Every record of a topic, read from the beginning, as a
    /// `read_committed` consumer sees them (librdkafka's default): only
    /// records of committed transactions. Read until every partition's
    /// position passes the log end taken first (the end counts commit
    /// markers and aborted records, which are never read).
    pub fn read_all(&self, topic: &str, partitions: i32) -> Vec<OwnedMessage> {
        self.read_all_as(topic, partitions, "read_committed")
    }

    /// [`Broker::read_all`] once it holds at least `n` records (outputs
    /// published apart from the records that made them: the outbox of
    /// scheduled jobs), read again a second later so that a copy published
    /// after the `n`th is seen too.
    pub fn read_at_least(&self, topic: &str, partitions: i32, n: usize, timeout: Duration) -> Vec<OwnedMessage> {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.read_all(topic, partitions).len();
            if got >= n {
                std::thread::sleep(Duration::from_secs(1));
                return self.read_all(topic, partitions);
            }
            assert!(Instant::now() < deadline, "{topic} holds {got} records, not the {n} awaited");
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// [`Broker::read_all`] at `isolation` (`read_committed` or `read_uncommitted`).
    pub fn read_all_as(&self, topic: &str, partitions: i32, isolation: &str) -> Vec<OwnedMessage> {
        // The high watermark, not the last stable offset: a transaction still
        // open (a killed producer's, until it times out) is waited for.
        let end = self.high_watermarks(topic, partitions);
        let c: BaseConsumer = self
            .client()
            .set("group.id", random_name("reader"))
            .set("enable.auto.commit", "false")
            .set("isolation.level", isolation)
            .create()
            .expect("consumer");
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
        }
        c.assign(&tpl).expect("assign");
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        let reached = |c: &BaseConsumer| {
            let at = c.position().expect("position");
            (0..partitions).all(|p| {
                let e = end[p as usize];
                e == 0 || matches!(at.find_partition(topic, p).map(|x| x.offset()), Some(Offset::Offset(o)) if o >= e)
            })
        };
        loop {
            match c.poll(Duration::from_millis(200)) {
                Some(m) => out.push(m.expect("read record").detach()),
                None if reached(&c) => break,
                None => assert!(
                    Instant::now() < deadline,
                    "read {} records of {topic}, not yet at its end {end:?}",
                    out.len()
                ),
            }
        }
        out
    }
}

/// A partition's watermarks, asked again for up to 60 s: just after a
/// broker restarted, its leader may not answer yet.
fn watermarks(c: &BaseConsumer, topic: &str, partition: i32) -> (i64, i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match c.fetch_watermarks(topic, partition, Duration::from_secs(10)) {
            Ok(w) => return w,
            Err(e) if Instant::now() < deadline => {
                eprintln!("watermarks of {topic}/{partition}: {e}; asking again");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => panic!("watermarks of {topic}/{partition}: {e}"),
        }
    }
}
